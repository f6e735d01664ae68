//! Snapshot and behaviour tests of `HandlebarsRenderer`: both templates, user templates, strictness, `bash -n`.

use slurm_core::{
    ArrayContext, EnvVar, ErrorKind, Renderer, ScriptContext, SecretRegistry, TemplateKind,
};
use slurm_render::{check_syntax, HandlebarsRenderer};

/// A small, valid single-node context: the base the cases below change.
fn example_context() -> ScriptContext {
    include!("fixtures/example_context.rs")
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: value.into(),
    }
}

/// 1 node, 4 GPUs, with an image, mounts and an env sidecar.
fn one_node_with_image() -> ScriptContext {
    ScriptContext {
        image: Some("/lustre/images/nvcr.io_nvidia_tao_5.5.sqsh".into()),
        container_mounts: vec![
            "/lustre/data:/data:ro".into(),
            "/lustre/users/me/results/resnet-train-a1b2c3:/results".into(),
        ],
        command: "python train.py --spec /data/spec.yaml --out \"/results/it's here\"".into(),
        env_file: Some("/lustre/users/me/jobs/resnet-train-a1b2c3.env".into()),
        env: vec![env("HF_HOME", "/lustre/cache/hf")],
        ..example_context()
    }
}

/// 2 nodes, 8 GPUs each, exclusive, with an account and extra env.
fn two_nodes_exclusive() -> ScriptContext {
    ScriptContext {
        job_name: "cosmos-train-00ff11".into(),
        partition: Some("polar,polar3".into()),
        account: Some("research-gpu".into()),
        nodes: 2,
        gpus_per_node: 8,
        cpus_per_task: 64,
        memory: Some("512G".into()),
        time: "1-00:00:00".into(),
        child_timeout_secs: 82_080,
        exclusive: true,
        requeue: false,
        image: Some("/lustre/images/cosmos.sqsh".into()),
        container_mounts: vec!["/lustre/data:/data".into()],
        command: "torchrun --nnodes \"$WORLD_SIZE\" --node_rank \"$NODE_RANK\" train.py".into(),
        env: vec![env("TOKENIZERS_PARALLELISM", "false")],
        extra_env: vec![
            env("NCCL_P2P_DISABLE", "1"),
            env("NCCL_SOCKET_IFNAME", "eth0"),
        ],
        extra_sbatch: vec!["--qos=high".into(), "--reservation=big run".into()],
        dependency: None,
        exclude: Vec::new(),
        array: None,
        ..example_context()
    }
}

/// No image: a plain srun, no GPUs, memory set.
fn no_image() -> ScriptContext {
    ScriptContext {
        gpus_per_node: 0,
        cpus_per_task: 2,
        memory: Some("8G".into()),
        partition: None,
        command: "echo \"$HOSTNAME\"; nvidia-smi || true".into(),
        ..example_context()
    }
}

#[test]
fn snapshot_one_node_four_gpus_with_image() {
    let script = HandlebarsRenderer::new()
        .render(TemplateKind::SingleNode, &one_node_with_image())
        .unwrap();
    insta::assert_snapshot!("singlenode_1x4_image", script);
}

#[test]
fn snapshot_two_nodes_eight_gpus_exclusive() {
    let script = HandlebarsRenderer::new()
        .render(TemplateKind::MultiNode, &two_nodes_exclusive())
        .unwrap();
    insta::assert_snapshot!("multinode_2x8_exclusive", script);
}

#[test]
fn snapshot_no_image() {
    let script = HandlebarsRenderer::new()
        .render(TemplateKind::SingleNode, &no_image())
        .unwrap();
    insta::assert_snapshot!("singlenode_no_image", script);
}

const USER_TEMPLATE: &str = "#!/bin/bash
#SBATCH --job-name={{sbatch job_name}}
#SBATCH --time={{sbatch time}}
{{#if partition}}
#SBATCH --partition={{sbatch partition}}
{{/if}}
set -euo pipefail
# a plain value is shell-quoted too:
cd {{results_dir}}
srun bash -c {{sh command}}
";

#[test]
fn snapshot_custom_template_dir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("singlenode.sbatch.hbs"), USER_TEMPLATE).unwrap();
    let renderer = HandlebarsRenderer::with_template_dir(dir.path()).unwrap();
    assert!(renderer.template_origin(TemplateKind::SingleNode).is_some());
    assert!(renderer.template_origin(TemplateKind::MultiNode).is_none());
    let context = ScriptContext {
        results_dir: "/lustre/my results/x".into(),

        results_dir_in_job: "/lustre/my results/x".into(),
        ..example_context()
    };
    let script = renderer.render(TemplateKind::SingleNode, &context).unwrap();
    insta::assert_snapshot!("custom_template", script);
    assert!(script.contains("cd '/lustre/my results/x'\n"));
    // The multinode template is still the built-in one.
    let multi = renderer
        .render(TemplateKind::MultiNode, &two_nodes_exclusive())
        .unwrap();
    assert!(multi.contains("--wait-all-nodes=1"));
}

/// A sweep of 8 tasks, two at a time, after two parents, kept off a faulty node.
fn array_after_parents() -> ScriptContext {
    ScriptContext {
        dependency: Some("afterok:41:42".into()),
        exclude: vec!["n2".into()],
        array: Some(ArrayContext {
            tasks: "0-7%2".into(),
            sweep_file: Some("/lustre/users/me/results/sweep-a1b2c3/sweep/params.sh".into()),
        }),
        ..no_image()
    }
}

#[test]
fn snapshot_array_with_dependency_and_exclusion() {
    let script = HandlebarsRenderer::new()
        .render(TemplateKind::SingleNode, &array_after_parents())
        .unwrap();
    insta::assert_snapshot!("singlenode_array_after", script);
    assert!(script.contains("#SBATCH --array=0-7%2\n"));
    assert!(
        script.contains("#SBATCH --dependency=afterok:41:42\n#SBATCH --kill-on-invalid-dep=no\n")
    );
    assert!(script.contains("#SBATCH --exclude=n2\n"));
    assert!(script.contains("%x-%A_%a.slurm.out"));
    let bad = ScriptContext {
        dependency: Some("afterok:1;rm".into()),
        ..array_after_parents()
    };
    let error = HandlebarsRenderer::new()
        .render(TemplateKind::SingleNode, &bad)
        .unwrap_err();
    assert!(error.to_string().contains("dependency"), "{error}");
}

/// The NCCL probe of a 2-node job: its ladder runs in the batch step, each rung a step
/// through `slurm_run_step`.
fn probe_two_nodes() -> ScriptContext {
    ScriptContext {
        job_name: "nccl-probe-00aa11".into(),
        command: "echo \"ladder in $1\"; slurm_run_step 'echo rung on $NODE_RANK'".into(),
        probe: true,
        extra_env: Vec::new(),
        ..two_nodes_exclusive()
    }
}

/// A job that waited for its probe and exports the knobs it found.
fn after_probe() -> ScriptContext {
    ScriptContext {
        dependency: Some("afterok:41".into()),
        knobs_file: Some("/lustre/users/me/results/nccl-probe-00aa11/nccl/knobs.env".into()),
        resume: None,
        ..two_nodes_exclusive()
    }
}

#[test]
fn snapshot_a_probe_and_the_job_after_it() {
    let renderer = HandlebarsRenderer::new();
    let probe = renderer
        .render(TemplateKind::MultiNode, &probe_two_nodes())
        .unwrap();
    assert!(probe.contains("export -f slurm_run_step\n"), "{probe}");
    insta::assert_snapshot!("multinode_probe", probe);
    let job = renderer
        .render(TemplateKind::MultiNode, &after_probe())
        .unwrap();
    insta::assert_snapshot!("multinode_after_probe", job);
    // The knobs come before the job's own env, which wins.
    let knobs = job.find("done < ").unwrap();
    let own = job.find("export NCCL_P2P_DISABLE=1").unwrap();
    assert!(knobs < own, "{job}");
}

/// Issue 13: the probe's ladder and the job after it, run by bash with stand-ins for
/// srun: each rung runs on "every node" in order, and the job exports the knobs the
/// probe wrote, its own values winning.
#[test]
fn the_probe_script_runs_its_ladder_and_the_job_reads_the_knobs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // srun: run the step's command once per node, NODE_RANK from SLURM_NODEID.
    let srun = "#!/bin/bash\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\nfor n in 0 1; do SLURM_NODEID=$n \"$@\"; done\n";
    std::fs::write(bin.join("srun"), srun).unwrap();
    std::fs::write(bin.join("scontrol"), "#!/bin/bash\necho n1; echo n2\n").unwrap();
    for tool in ["srun", "scontrol"] {
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(bin.join(tool))
            .status()
            .unwrap();
    }
    let context = ScriptContext {
        log_dir: format!("{root}/logs"),
        results_dir: format!("{root}/probe"),
        results_dir_in_job: format!("{root}/probe"),
        image: None,
        container_mounts: Vec::new(),
        ..probe_two_nodes()
    };
    let renderer = HandlebarsRenderer::new();
    let script = renderer.render(TemplateKind::MultiNode, &context).unwrap();
    let run = |script: &str| {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("SLURM_JOB_ID", "7")
            .env("SLURM_JOB_NODELIST", "n[1-2]")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    run(&script);
    let main =
        std::fs::read_to_string(format!("{root}/logs/nccl-probe-00aa11-7/main.out")).unwrap();
    assert_eq!(
        main,
        format!("ladder in {root}/probe\nrung on 0\nrung on 1\n")
    );
    // The job after it: the knobs file read, the spec's value kept.
    std::fs::create_dir_all(format!("{root}/probe/nccl")).unwrap();
    std::fs::write(
        format!("{root}/probe/nccl/knobs.env"),
        "NCCL_IB_DISABLE=1\nNCCL_P2P_DISABLE=0\nNOT A NAME=x\nNCCL_SOCKET_IFNAME=^lo docker",
    )
    .unwrap();
    let job = ScriptContext {
        job_name: "job-00bb22".into(),
        log_dir: format!("{root}/logs"),
        results_dir: format!("{root}/job"),
        results_dir_in_job: format!("{root}/job"),
        image: None,
        container_mounts: Vec::new(),
        knobs_file: Some(format!("{root}/probe/nccl/knobs.env")),
        resume: None,
        command: "echo \"ib=$NCCL_IB_DISABLE p2p=$NCCL_P2P_DISABLE if=$NCCL_SOCKET_IFNAME\"".into(),
        ..after_probe()
    };
    run(&renderer.render(TemplateKind::MultiNode, &job).unwrap());
    let main = std::fs::read_to_string(format!("{root}/logs/job-00bb22-7/main.out")).unwrap();
    assert_eq!(
        main, "ib=1 p2p=1 if=eth0\nib=1 p2p=1 if=eth0\n",
        "the spec's extra env wins"
    );
}

#[test]
fn a_user_template_without_the_probe_branch_refuses_a_probe() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("multinode.sbatch.hbs"), USER_TEMPLATE).unwrap();
    let renderer = HandlebarsRenderer::with_template_dir(dir.path()).unwrap();
    let err = renderer
        .render(TemplateKind::MultiNode, &probe_two_nodes())
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("slurm_run_step") && text.contains("nccl_probe: never"),
        "{text}"
    );
    // The built-in single-node template runs probes.
    let single = ScriptContext {
        nodes: 1,
        ..probe_two_nodes()
    };
    assert!(HandlebarsRenderer::new()
        .render(TemplateKind::SingleNode, &single)
        .unwrap()
        .contains("slurm_run_step() {"));
}

#[test]
fn every_rendered_script_passes_bash_n_and_the_lint() {
    let renderer = HandlebarsRenderer::new();
    let cases = [
        (TemplateKind::SingleNode, one_node_with_image()),
        (TemplateKind::MultiNode, two_nodes_exclusive()),
        (TemplateKind::SingleNode, no_image()),
        (TemplateKind::SingleNode, array_after_parents()),
        (
            TemplateKind::MultiNode,
            ScriptContext {
                nodes: 2,
                ..array_after_parents()
            },
        ),
        (
            TemplateKind::MultiNode,
            ScriptContext {
                nodes: 3,
                ..no_image()
            },
        ),
        (TemplateKind::MultiNode, probe_two_nodes()),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                nodes: 1,
                ..probe_two_nodes()
            },
        ),
        (TemplateKind::MultiNode, after_probe()),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                nodes: 1,
                ..after_probe()
            },
        ),
    ];
    for (kind, context) in cases {
        let script = renderer.render(kind, &context).unwrap();
        assert_eq!(check_syntax(&script).unwrap(), vec![], "{kind}: bash -n");
        renderer
            .lint(&script, &SecretRegistry::new())
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
}

#[test]
fn multinode_is_a_superset_of_singlenode() {
    let renderer = HandlebarsRenderer::new();
    let single = renderer
        .render(TemplateKind::SingleNode, &example_context())
        .unwrap();
    let multi = renderer
        .render(
            TemplateKind::MultiNode,
            &ScriptContext {
                nodes: 2,
                ..example_context()
            },
        )
        .unwrap();
    for line in single.lines() {
        let kept = line.starts_with("#SBATCH")
            || line.starts_with("export ")
            || line.starts_with("mkdir ")
            || line.starts_with("exec ");
        if kept && line != "#SBATCH --nodes=1" {
            assert!(multi.contains(line), "multinode lacks `{line}`");
        }
    }
    for extra in [
        "#SBATCH --nodes=2",
        "#SBATCH --wait-all-nodes=1",
        "export MASTER_PORT=29500",
        "export WORLD_SIZE=2",
        "export NUM_GPU_PER_NODE=4",
        "scontrol show hostnames \"$SLURM_JOB_NODELIST\"",
        "export NODE_RANK=\"$SLURM_NODEID\" TAO_NODE_RANK=\"$SLURM_NODEID\"",
        "export TAO_NODE_COUNT=\"$WORLD_SIZE\"",
        "srun --nodes=2 --ntasks-per-node=1",
    ] {
        assert!(multi.contains(extra), "multinode lacks `{extra}`");
        assert!(!single.contains(extra), "singlenode has `{extra}`");
    }
}

#[test]
fn directives_follow_the_context() {
    let renderer = HandlebarsRenderer::new();
    let s = renderer
        .render(TemplateKind::SingleNode, &one_node_with_image())
        .unwrap();
    assert!(s.contains("#SBATCH --gres=gpu:4\n"));
    assert!(s.contains("#SBATCH --requeue\n"));
    assert!(!s.contains("--exclusive"));
    assert!(!s.contains("--account"));
    assert!(s.contains("#SBATCH --output=/lustre/users/me/logs/%x-%j.slurm.out\n"));
    assert!(s.contains(
        "slurm_run_log_dir=/lustre/users/me/logs/resnet-train-a1b2c3-\"${SLURM_JOB_ID}\"\n"
    ));
    assert!(s.contains("timeout 13680s srun"));
    assert!(s.contains(
        "--container-image=/lustre/images/nvcr.io_nvidia_tao_5.5.sqsh --container-mounts='/lustre/data:/data:ro,/lustre/users/me/results/resnet-train-a1b2c3:/results'"
    ));
    assert!(s.contains("shred -- -"));
    let n = renderer
        .render(TemplateKind::SingleNode, &no_image())
        .unwrap();
    assert!(!n.contains("--gres"));
    assert!(!n.contains("--container"));
    assert!(!n.contains("shred"));
    assert!(n.contains("#SBATCH --mem=8G\n"));
    let m = renderer
        .render(TemplateKind::MultiNode, &two_nodes_exclusive())
        .unwrap();
    assert!(m.contains("#SBATCH --exclusive\n"));
    assert!(m.contains("#SBATCH --no-requeue\n"));
    assert!(m.contains("#SBATCH --account=research-gpu\n"));
    assert!(m.contains("#SBATCH --reservation=big run\n"));
}

#[test]
fn hostile_values_stay_one_word() {
    // A command and env values full of shell syntax reach bash as exactly one word each:
    // render, then let bash print the words srun would get.
    let command = "echo $(id) `id` \"q\" 'it''s' ; rm -rf / \n second line";
    let context = ScriptContext {
        command: command.into(),
        env: vec![env("WEIRD", "a'b\"c $(d) \n e")],
        ..no_image()
    };
    let script = HandlebarsRenderer::new()
        .render(TemplateKind::SingleNode, &context)
        .unwrap();
    let line_start = script.find("  bash -c ").unwrap() + "  bash -c ".len();
    let word_end = script[line_start..].find(" &\n").unwrap() + line_start;
    let word = &script[line_start..word_end];
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("printf '%s' {word}"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), command);
    let export = script
        .lines()
        .position(|l| l.starts_with("export WEIRD="))
        .unwrap();
    // The value is quoted: it starts with a quote right after the `=`.
    let value = &script.lines().nth(export).unwrap()["export WEIRD=".len()..];
    assert!(value.starts_with('\'') || value.starts_with('"'), "{value}");
}

#[test]
fn a_missing_variable_in_a_user_template_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    for (source, needle) in [
        ("#!/bin/bash\necho {{no_such_field}}\n", "no_such_field"),
        ("#!/bin/bash\necho {{sh no_such_field}}\n", "no_such_field"),
        (
            "#!/bin/bash\n{{#if no_such_flag}}x{{/if}}\n",
            "no_such_flag",
        ),
        (
            "#!/bin/bash\n{{#each no_such_list}}x{{/each}}\n",
            "no_such_list",
        ),
    ] {
        std::fs::write(dir.path().join("multinode.sbatch.hbs"), source).unwrap();
        let renderer = HandlebarsRenderer::with_template_dir(dir.path()).unwrap();
        let err = renderer
            .render(
                TemplateKind::MultiNode,
                &ScriptContext {
                    nodes: 2,
                    ..example_context()
                },
            )
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Render, "{source}");
        assert!(err.to_string().contains(needle), "{source}: {err}");
    }
}

#[test]
fn user_template_helpers_refuse_unsafe_values() {
    let dir = tempfile::tempdir().unwrap();
    // A null value given to `sh` or `sbatch` is refused (wrap it in #if).
    std::fs::write(
        dir.path().join("singlenode.sbatch.hbs"),
        "#!/bin/bash\n#SBATCH --account={{sbatch account}}\n",
    )
    .unwrap();
    let renderer = HandlebarsRenderer::with_template_dir(dir.path()).unwrap();
    let err = renderer
        .render(TemplateKind::SingleNode, &example_context())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Render);
    assert!(err.to_string().contains("account is not set"), "{err}");
    // A multi-line value in an #SBATCH line is refused even if the template puts it there.
    std::fs::write(
        dir.path().join("singlenode.sbatch.hbs"),
        "#!/bin/bash\n#SBATCH --comment={{sbatch_line command}}\n",
    )
    .unwrap();
    let renderer = HandlebarsRenderer::with_template_dir(dir.path()).unwrap();
    let context = ScriptContext {
        command: "true\n#SBATCH --uid=0".into(),
        ..example_context()
    };
    let err = renderer
        .render(TemplateKind::SingleNode, &context)
        .unwrap_err();
    assert!(
        err.to_string().contains("break out of the #SBATCH line"),
        "{err}"
    );
    assert!(
        !err.to_string().contains("--uid"),
        "the value leaked: {err}"
    );
    // `ident` refuses a non-identifier.
    std::fs::write(
        dir.path().join("singlenode.sbatch.hbs"),
        "#!/bin/bash\nexport {{ident command}}=1\n",
    )
    .unwrap();
    let renderer = HandlebarsRenderer::with_template_dir(dir.path()).unwrap();
    let err = renderer
        .render(TemplateKind::SingleNode, &example_context())
        .unwrap_err();
    assert!(
        err.to_string().contains("not a shell variable name"),
        "{err}"
    );
}

#[test]
fn template_dir_errors_name_the_field() {
    let missing = HandlebarsRenderer::with_template_dir("/no/such/folder").unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::Config);
    assert!(missing.to_string().contains("template_dir"));
    let empty = tempfile::tempdir().unwrap();
    let err = HandlebarsRenderer::with_template_dir(empty.path()).unwrap_err();
    assert!(err.to_string().contains("neither"), "{err}");
    std::fs::write(
        empty.path().join("singlenode.sbatch.hbs"),
        "{{#if x}}unclosed",
    )
    .unwrap();
    let err = HandlebarsRenderer::with_template_dir(empty.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Render);
    assert!(err.to_string().contains("singlenode.sbatch.hbs"), "{err}");
}

#[test]
fn invalid_contexts_are_refused_with_the_field() {
    let renderer = HandlebarsRenderer::new();
    let cases: Vec<(TemplateKind, ScriptContext, &str)> = vec![
        (
            TemplateKind::SingleNode,
            ScriptContext {
                job_name: "../x".into(),
                ..example_context()
            },
            "job_name",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                nodes: 2,
                ..example_context()
            },
            "nodes",
        ),
        (
            TemplateKind::MultiNode,
            ScriptContext {
                nodes: 0,
                ..example_context()
            },
            "nodes",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                partition: Some("gpu\n#SBATCH --uid=0".into()),
                ..example_context()
            },
            "partition",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                account: Some("a b".into()),
                ..example_context()
            },
            "account",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                memory: Some("lots".into()),
                ..example_context()
            },
            "memory",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                time: "4h".into(),
                ..example_context()
            },
            "time",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                child_timeout_secs: 14_400,
                ..example_context()
            },
            "child_timeout_secs",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                child_timeout_secs: 0,
                ..example_context()
            },
            "child_timeout_secs",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                log_dir: "relative/logs".into(),
                ..example_context()
            },
            "log_dir",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                log_dir: "/logs/100%".into(),
                ..example_context()
            },
            "log_dir",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                results_dir: "/r\n/x".into(),

                results_dir_in_job: "/r\n/x".into(),
                ..example_context()
            },
            "results_dir",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                container_mounts: vec!["/a:/b".into()],
                ..example_context()
            },
            "container_mounts",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                image: Some("/i.sqsh".into()),
                container_mounts: vec!["/a,/b".into()],
                ..example_context()
            },
            "container_mounts",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                image: Some("/i.sqsh".into()),
                container_mounts: vec!["a:/b".into()],
                ..example_context()
            },
            "container_mounts",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                image: Some("nvcr.io/nvidia/tao:5".into()),
                ..example_context()
            },
            "image",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                command: "  ".into(),
                ..example_context()
            },
            "command",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                command: "a\0b".into(),
                ..example_context()
            },
            "command",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                env: vec![env("A-B", "1")],
                ..example_context()
            },
            "env",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                env: vec![env("slurm_run_status", "1")],
                ..example_context()
            },
            "env",
        ),
        (
            TemplateKind::MultiNode,
            ScriptContext {
                nodes: 2,
                extra_env: vec![env("WORLD_SIZE", "16")],
                ..example_context()
            },
            "extra_env",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                env_file: Some("rel.env".into()),
                ..example_context()
            },
            "env_file",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                extra_sbatch: vec!["--qos=a\n--uid=0".into()],
                ..example_context()
            },
            "extra_sbatch",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                extra_sbatch: vec!["qos=a".into()],
                ..example_context()
            },
            "extra_sbatch",
        ),
        (
            TemplateKind::SingleNode,
            ScriptContext {
                extra_sbatch: vec!["--output=/tmp/x".into()],
                ..example_context()
            },
            "extra_sbatch",
        ),
    ];
    for (kind, context, field) in cases {
        let err = renderer.render(kind, &context).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{field}: {err}");
        assert!(
            err.to_string().starts_with(&format!("invalid {field}:")),
            "{field}: {err}"
        );
    }
}

#[test]
fn lint_refuses_a_script_holding_a_registered_secret() {
    let mut secrets = SecretRegistry::new();
    secrets.register("MY_VALUE", "opensesame-12345");
    let context = ScriptContext {
        env: vec![env("INNOCENT", "opensesame-12345")],
        ..example_context()
    };
    let renderer = HandlebarsRenderer::new();
    let script = renderer.render(TemplateKind::SingleNode, &context).unwrap();
    let err = renderer.lint(&script, &secrets).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Lint);
    let message = err.to_string();
    assert!(
        message.contains("registered-secret (MY_VALUE)"),
        "{message}"
    );
    assert!(!message.contains("opensesame"), "{message}");
}

#[test]
fn an_array_task_never_removes_the_sidecar_its_array_shares() {
    // Issue 26, defect 2: every task's EXIT trap shredded the one sidecar of the array,
    // so a task that started after another ended found it missing. A single job still
    // removes its own when it ends.
    for kind in [TemplateKind::SingleNode, TemplateKind::MultiNode] {
        let array = ScriptContext {
            env_file: Some("/r/x/env/job_x.env".into()),
            nodes: if kind == TemplateKind::MultiNode {
                2
            } else {
                1
            },
            ..array_after_parents()
        };
        let script = HandlebarsRenderer::new().render(kind, &array).unwrap();
        assert!(
            script.contains("source \"$slurm_run_env_file\""),
            "{script}"
        );
        assert!(
            !script.contains("trap slurm_run_forget_env EXIT"),
            "{script}"
        );
        assert!(!script.contains("shred --"), "{script}");
        let single = ScriptContext {
            array: None,
            ..array
        };
        let script = HandlebarsRenderer::new().render(kind, &single).unwrap();
        assert!(
            script.contains("trap slurm_run_forget_env EXIT"),
            "{script}"
        );
    }
}
