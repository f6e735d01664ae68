//! Render plus lint of the multinode template: scripts per second on one core.
//!
//! Four measurements: render alone, render + secret scan (no process started),
//! render + the full lint (secret scan and `bash -n`, which starts one bash), and the
//! reference's own lint step, `bash -n` of the rendered script, as the baseline. Writes
//! the `render` area of `BENCHMARKS.md` from criterion's estimates.

use std::time::Duration;

use criterion::{Criterion, Throughput};
use slurm_core::{EnvVar, Renderer, ScriptContext, SecretRegistry, TemplateKind};
use slurm_render::{scan_secrets, HandlebarsRenderer};
use slurm_run_testsupport::bench::{results_dir, Area, Baseline, Row};

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
        roles: Vec::new(),
        heterogeneous: false,
        roles_dir: None,
        resume: None,
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
    group.bench_function("render_scan", |b| {
        b.iter(|| {
            let script = renderer.render(TemplateKind::MultiNode, &context).unwrap();
            assert!(scan_secrets(&script, &secrets).is_empty());
            script
        })
    });
    let script = renderer.render(TemplateKind::MultiNode, &context).unwrap();
    group.bench_function("bash_n", |b| {
        b.iter(|| assert!(slurm_render::check_syntax(&script).unwrap().is_empty()))
    });
    group.bench_function("render_lint", |b| {
        b.iter(|| {
            let script = renderer.render(TemplateKind::MultiNode, &context).unwrap();
            renderer.lint(&script, &secrets).unwrap();
            script
        })
    });
    group.finish();
}

/// Criterion's median estimate of `name` in the `multinode` group.
fn estimate(name: &str) -> Duration {
    let path = results_dir()
        .join("criterion/multinode")
        .join(name)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("criterion's estimates {}: {e}", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).expect("criterion's JSON");
    let ns = json["median"]["point_estimate"]
        .as_f64()
        .expect("a median estimate");
    Duration::from_nanos(ns as u64)
}

fn main() {
    let mut criterion = Criterion::default()
        .output_directory(&results_dir().join("criterion"))
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches` runs each function once: nothing to report
    }
    let mut area = Area::new("render", "`bash -n` of the script alone", "-");
    let bash_n = Baseline::measured("the reference's lint step", estimate("bash_n"));
    area.push(Row::new(
        "render the multinode template",
        estimate("render"),
    ));
    area.push(Row::new("render + secret scan", estimate("render_scan")).note("no process started"));
    area.push(
        Row::new(
            "render + full lint (secret scan, `bash -n`)",
            estimate("render_lint"),
        )
        .bare(bash_n)
        .note("what a submit does before it opens the record"),
    );
    area.notes.push(
        "Criterion's median per script, one core. The full lint starts one `bash -n`; the \
         baseline is that process alone on the same script."
            .to_string(),
    );
    area.save();
}
