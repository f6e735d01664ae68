//! Render plus lint of the multinode template: scripts per second on one core.
//!
//! Three measurements: render alone, render + secret scan (no process started), and
//! render + the full lint (secret scan and `bash -n`, which starts one bash).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use slurm_core::redact::SecretRegistry;
use slurm_core::render::{EnvVar, Renderer, ScriptContext, TemplateKind};
use slurm_render::{scan_secrets, HandlebarsRenderer};

fn context() -> ScriptContext {
    ScriptContext {
        job_name: "cosmos-train-00ff11".into(),
        partition: Some("polar,polar3,polar4".into()),
        account: Some("research-gpu".into()),
        nodes: 4,
        gpus_per_node: 8,
        cpus_per_task: 64,
        memory: Some("512G".into()),
        time: "04:00:00".into(),
        child_timeout_secs: 13_680,
        log_dir: "/lustre/users/me/logs".into(),
        results_dir: "/lustre/users/me/results/cosmos-train-00ff11".into(),

        results_dir_in_job: "/lustre/users/me/results/cosmos-train-00ff11".into(),
        image: Some("/lustre/images/nvcr.io_nvidia_cosmos_1.0.sqsh".into()),
        container_mounts: vec![
            "/lustre/data:/data:ro".into(),
            "/lustre/users/me/results/cosmos-train-00ff11:/results".into(),
        ],
        command: "torchrun --nnodes \"$WORLD_SIZE\" --nproc_per_node \"$NUM_GPU_PER_NODE\" --node_rank \"$NODE_RANK\" --master_addr \"$MASTER_ADDR\" train.py --spec /data/spec.yaml".into(),
        env_file: Some("/lustre/users/me/jobs/cosmos-train-00ff11.env".into()),
        env: vec![
            EnvVar { name: "HF_HOME".into(), value: "/lustre/cache/hf".into() },
            EnvVar { name: "TOKENIZERS_PARALLELISM".into(), value: "false".into() },
        ],
        extra_env: vec![EnvVar { name: "NCCL_P2P_DISABLE".into(), value: "1".into() }],
        requeue: true,
        exclusive: true,
        extra_sbatch: vec!["--qos=high".into()],
        dependency: None,
        exclude: Vec::new(),
        array: None,
        probe: false,
        knobs_file: None,
    }
}

fn bench(c: &mut Criterion) {
    let renderer = HandlebarsRenderer::new();
    let context = context();
    let mut secrets = SecretRegistry::new();
    secrets.register("HF_TOKEN", "hf_notInTheScriptAtAll0123456789");
    secrets.register("NGC_API_KEY", "nvapi-alsoNotInTheScript-0123456789");

    let mut group = c.benchmark_group("multinode");
    group.throughput(Throughput::Elements(1));
    group.bench_function("render", |b| {
        b.iter(|| renderer.render(TemplateKind::MultiNode, &context).unwrap())
    });
    group.bench_function("render+scan", |b| {
        b.iter(|| {
            let script = renderer.render(TemplateKind::MultiNode, &context).unwrap();
            assert!(scan_secrets(&script, &secrets).is_empty());
            script
        })
    });
    group.bench_function("render+lint(bash -n)", |b| {
        b.iter(|| {
            let script = renderer.render(TemplateKind::MultiNode, &context).unwrap();
            renderer.lint(&script, &secrets).unwrap();
            script
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
