//! Tests of the job spec: parsing, validation, resolution.

use super::*;

const ISSUE_YAML: &str = r#"
name: hello
command: "python train.py"
image: nvcr.io/nvidia/pytorch:24.01-py3
nodes: 1
gpus_per_node: 4
cpus_per_task: 16
time: "04:00:00"
partition: gpu
env: {EPOCHS: "10"}
secrets: [HF_TOKEN]
mounts: ["lustre:///data/train:/data"]
requeue: true
"#;

fn spec() -> JobSpec {
    JobSpec::new("hello", "python train.py")
}

fn invalid_field(err: Error) -> String {
    match err {
        Error::Invalid { field, .. } => field,
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn the_issue_example_reads_and_resolves() {
    let s = JobSpec::from_yaml_str(ISSUE_YAML).unwrap();
    assert_eq!(s.name, "hello");
    assert_eq!(s.env.get("EPOCHS").map(String::as_str), Some("10"));
    assert_eq!(s.secrets, vec!["HF_TOKEN"]);
    // A registry image resolves: the backend converts it to a .sqsh before any GPU
    // job sees it (or passes it through when the spec opts in).
    let r = s.resolve(&SpecDefaults::default()).unwrap();
    assert_eq!(
        (r.nodes, r.gpus_per_node, r.gpus, r.exclusive),
        (1, 4, 4, false)
    );
    assert_eq!(r.cpus_per_task, 16);
    assert_eq!(r.wall.to_slurm(), "04:00:00");
    assert_eq!(r.child_timeout_secs, 13_680);
    assert_eq!(r.partition.as_deref(), Some("gpu"));
    assert!(r.requeue);
}

#[test]
fn json_and_yaml_agree_and_from_path_picks_by_extension() {
    let y = JobSpec::from_yaml_str(ISSUE_YAML).unwrap();
    let json = serde_json::to_string(&y).unwrap();
    let j = JobSpec::from_json_str(&json).unwrap();
    assert_eq!(y, j);
    assert_eq!(y.digest(), j.digest());
    let dir = tempfile::tempdir().unwrap();
    let yp = dir.path().join("s.yml");
    std::fs::write(&yp, ISSUE_YAML).unwrap();
    assert_eq!(JobSpec::from_path(&yp).unwrap(), y);
    let jp = dir.path().join("s.JSON");
    std::fs::write(&jp, &json).unwrap();
    assert_eq!(JobSpec::from_path(&jp).unwrap(), y);
    let tp = dir.path().join("s.txt");
    std::fs::write(&tp, ISSUE_YAML).unwrap();
    assert_eq!(
        invalid_field(JobSpec::from_path(&tp).unwrap_err()),
        "spec path"
    );
    let missing = JobSpec::from_path(dir.path().join("nope.yaml")).unwrap_err();
    assert_eq!(missing.kind(), crate::ErrorKind::Io);
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let err = JobSpec::from_yaml_str("name: a\ncommand: b\ngpu: 4\n").unwrap_err();
    assert_eq!(invalid_field(err), "gpu");
    let err = JobSpec::from_json_str(r#"{"name":"a","command":"b","wall":"1"}"#).unwrap_err();
    assert!(err.to_string().contains("remove it"));
    assert_eq!(invalid_field(err), "wall");
    let err = JobSpec::from_yaml_str("command: b\n").unwrap_err();
    assert_eq!(invalid_field(err), "name");
    let err = JobSpec::from_yaml_str("name: a\ncommand: b\ntime: soon\n").unwrap_err();
    assert!(err.to_string().contains("HH:MM:SS"), "{err}");
}

#[test]
fn wall_time_forms() {
    let cases = [
        ("30", 30 * 60, "00:30:00"),
        ("30:15", 30 * 60 + 15, "00:30:15"),
        ("04:00:00", 4 * 3600, "04:00:00"),
        ("2-12", 2 * 86400 + 12 * 3600, "2-12:00:00"),
        ("1-02:30", 86400 + 2 * 3600 + 30 * 60, "1-02:30:00"),
        ("1-02:30:05", 86400 + 2 * 3600 + 30 * 60 + 5, "1-02:30:05"),
    ];
    for (text, secs, slurm) in cases {
        let w = WallTime::parse(text).unwrap();
        assert_eq!(w.as_secs(), secs, "{text}");
        assert_eq!(w.to_slurm(), slurm, "{text}");
        assert_eq!(WallTime::parse(&w.to_slurm()).unwrap(), w);
    }
    assert_eq!(WallTime::parse("00:00:30").unwrap().minutes(), 1);
    for bad in [
        "",
        "x",
        "1:2:3:4",
        "1-",
        "-1",
        "1-2:3:4:5",
        "1:-2",
        "UNLIMITED",
        "1.5",
        "99999999999",
    ] {
        assert_eq!(
            invalid_field(WallTime::parse(bad).unwrap_err()),
            "time",
            "{bad}"
        );
    }
    // YAML integers are minutes.
    let s = JobSpec::from_yaml_str("name: a\ncommand: b\ntime: 90\n").unwrap();
    assert_eq!(s.time.unwrap().minutes(), 90);
}

#[test]
fn wall_above_the_maximum_is_refused_and_child_timeout_follows_the_wall() {
    let d = SpecDefaults::default();
    let mut s = spec();
    s.time = Some(WallTime::parse("04:00:01").unwrap());
    let err = s.resolve(&d).unwrap_err();
    assert!(err
        .to_string()
        .contains("exceeds the partition's maximum 04:00:00"));
    assert_eq!(invalid_field(err), "time");
    s.time = Some(WallTime::parse("02:00:00").unwrap());
    assert_eq!(s.resolve(&d).unwrap().child_timeout_secs, 6_840);
    s.time = Some(WallTime::parse("10").unwrap());
    assert_eq!(s.resolve(&d).unwrap().child_timeout_secs, 570);
    s.time = Some(WallTime::parse("1").unwrap());
    assert_eq!(s.resolve(&d).unwrap().child_timeout_secs, 57);
    s.time = Some(WallTime::from_secs(30));
    assert_eq!(invalid_field(s.resolve(&d).unwrap_err()), "time");
    s.time = Some(WallTime::parse("02:00:00").unwrap());
    s.child_timeout = Some(WallTime::parse("02:00:00").unwrap());
    assert_eq!(invalid_field(s.resolve(&d).unwrap_err()), "child_timeout");
    s.child_timeout = Some(WallTime::parse("01:50:00").unwrap());
    assert_eq!(s.resolve(&d).unwrap().child_timeout_secs, 6_600);
    s.child_timeout = Some(WallTime::parse("01:50:30").unwrap());
    assert_eq!(s.resolve(&d).unwrap().child_timeout_secs, 6_630);
    s.child_timeout = Some(WallTime::from_secs(0));
    assert_eq!(invalid_field(s.resolve(&d).unwrap_err()), "child_timeout");
    // A longer partition, passed in as limits.
    let long = SpecDefaults {
        limits: Limits {
            max_wall: Some(WallTime::from_hours(48)),
            ..Limits::default()
        },
        ..SpecDefaults::default()
    };
    let mut s = spec();
    s.time = Some(WallTime::parse("1-00:00:00").unwrap());
    let r = s.resolve(&long).unwrap();
    assert_eq!(r.child_timeout_secs, 82_080);
    assert!(r.child_timeout_secs < r.wall.as_secs());
    // A partition without a limit takes any time.
    let unlimited = SpecDefaults {
        limits: Limits {
            max_wall: None,
            ..Limits::default()
        },
        ..SpecDefaults::default()
    };
    s.time = Some(WallTime::parse("30-00:00:00").unwrap());
    assert_eq!(
        s.resolve(&unlimited).unwrap().wall.to_slurm(),
        "30-00:00:00"
    );
    assert_eq!(invalid_field(s.resolve(&d).unwrap_err()), "time");
}

#[test]
fn gpu_and_node_resolution() {
    let d = SpecDefaults::default();
    let r = |f: &dyn Fn(&mut JobSpec)| {
        let mut s = spec();
        f(&mut s);
        s.resolve(&d)
    };
    let shape = |res: Resources| (res.nodes, res.gpus_per_node, res.gpus, res.exclusive);
    assert_eq!(shape(r(&|_| {}).unwrap()), (1, 4, 4, false));
    assert_eq!(shape(r(&|s| s.gpus = Some(16)).unwrap()), (2, 8, 16, true));
    assert_eq!(shape(r(&|s| s.gpus = Some(8)).unwrap()), (1, 8, 8, true));
    assert_eq!(shape(r(&|s| s.gpus = Some(2)).unwrap()), (1, 2, 2, false));
    assert_eq!(shape(r(&|s| s.gpus = Some(0)).unwrap()), (1, 0, 0, false));
    assert_eq!(
        shape(
            r(&|s| {
                s.gpus = Some(6);
                s.nodes = Some(2)
            })
            .unwrap()
        ),
        (2, 3, 6, false)
    );
    assert_eq!(shape(r(&|s| s.nodes = Some(3)).unwrap()), (3, 4, 12, false));
    assert_eq!(
        shape(
            r(&|s| {
                s.nodes = Some(2);
                s.gpus_per_node = Some(8)
            })
            .unwrap()
        ),
        (2, 8, 16, true)
    );
    assert_eq!(
        shape(
            r(&|s| {
                s.gpus = Some(16);
                s.gpus_per_node = Some(4)
            })
            .unwrap()
        ),
        (4, 4, 16, false)
    );
    let field = |f: &dyn Fn(&mut JobSpec)| invalid_field(r(f).unwrap_err());
    assert_eq!(field(&|s| s.gpus = Some(12)), "gpus");
    assert_eq!(
        field(&|s| {
            s.gpus = Some(16);
            s.nodes = Some(3)
        }),
        "nodes"
    );
    assert_eq!(
        field(&|s| {
            s.gpus = Some(5);
            s.nodes = Some(2)
        }),
        "gpus"
    );
    assert_eq!(field(&|s| s.gpus_per_node = Some(9)), "gpus_per_node");
    assert_eq!(
        field(&|s| {
            s.gpus = Some(10);
            s.gpus_per_node = Some(4)
        }),
        "gpus"
    );
    assert_eq!(
        field(&|s| {
            s.gpus = Some(4);
            s.gpus_per_node = Some(4);
            s.nodes = Some(2)
        }),
        "gpus"
    );
    assert_eq!(field(&|s| s.nodes = Some(0)), "nodes");
    assert_eq!(field(&|s| s.cpus_per_task = Some(0)), "cpus_per_task");
    let msg = r(&|s| s.gpus = Some(12)).unwrap_err().to_string();
    assert!(msg.contains("multiple of 8"), "{msg}");
}

#[test]
fn partition_account_and_requeue_defaults() {
    let d = SpecDefaults::default()
        .with_partition("gpu")
        .with_account("proj");
    let mut s = spec();
    let r = s.resolve(&d).unwrap();
    assert_eq!(
        (r.partition.as_deref(), r.account.as_deref()),
        (Some("gpu"), Some("proj"))
    );
    s.partition = Some("polar,polar3".into());
    s.requeue = Some(false);
    let r = s.resolve(&d).unwrap();
    assert_eq!(r.partition.as_deref(), Some("polar,polar3"));
    assert!(!r.requeue);
    assert_eq!(
        spec().resolve(&SpecDefaults::default()).unwrap().partition,
        None
    );
}

#[test]
fn unsafe_names_and_values_are_refused() {
    type Case = (&'static str, Box<dyn Fn(&mut JobSpec)>);
    let cases: Vec<Case> = vec![
        ("name", Box::new(|s| s.name = String::new())),
        ("name", Box::new(|s| s.name = "../etc".into())),
        ("name", Box::new(|s| s.name = "a b".into())),
        ("name", Box::new(|s| s.name = "x".repeat(65))),
        ("command", Box::new(|s| s.command = "  ".into())),
        (
            "env",
            Box::new(|s| {
                s.env.insert("1BAD".into(), "v".into());
            }),
        ),
        (
            "env",
            Box::new(|s| {
                s.env.insert("A-B".into(), "v".into());
            }),
        ),
        (
            "extra_env",
            Box::new(|s| {
                s.extra_env.insert("X".into(), "a\0b".into());
            }),
        ),
        ("secrets", Box::new(|s| s.secrets = vec!["HF TOKEN".into()])),
        (
            "secrets",
            Box::new(|s| s.secrets = vec!["T".into(), "T".into()]),
        ),
        (
            "secrets",
            Box::new(|s| {
                s.secrets = vec!["T".into()];
                s.env.insert("T".into(), "v".into());
            }),
        ),
        ("image", Box::new(|s| s.image = Some("./x.sqsh".into()))),
        ("mounts", Box::new(|s| s.mounts = vec!["data:/data".into()])),
        (
            "mounts",
            Box::new(|s| s.mounts = vec!["file:///x:/x".into()]),
        ),
        (
            "datasets",
            Box::new(|s| s.datasets = vec!["file:///home/me/ds".into()]),
        ),
        (
            "datasets",
            Box::new(|s| s.datasets = vec!["ds/train".into()]),
        ),
        (
            "supporting_files",
            Box::new(|s| s.supporting_files = vec!["".into()]),
        ),
        (
            "partition",
            Box::new(|s| s.partition = Some("gpu;rm -rf".into())),
        ),
        ("account", Box::new(|s| s.account = Some("a b".into()))),
        ("memory", Box::new(|s| s.memory = Some("lots".into()))),
        ("memory", Box::new(|s| s.memory = Some("64GG".into()))),
        (
            "extra_sbatch",
            Box::new(|s| s.extra_sbatch = vec!["#SBATCH --qos=x".into()]),
        ),
        (
            "extra_sbatch",
            Box::new(|s| s.extra_sbatch = vec!["--job-name=x".into()]),
        ),
        (
            "extra_sbatch",
            Box::new(|s| s.extra_sbatch = vec!["--qos=x\n--wrap=y".into()]),
        ),
        (
            "labels",
            Box::new(|s| {
                s.labels.insert("a/b".into(), "x".into());
            }),
        ),
        (
            "labels.arch",
            Box::new(|s| {
                s.labels.insert("arch".into(), "../x".into());
            }),
        ),
    ];
    for (want, f) in cases {
        let mut s = spec();
        f(&mut s);
        let err = s.validate().unwrap_err();
        assert_eq!(invalid_field(err), want);
    }
    let mut ok = spec();
    ok.memory = Some("7200M".into());
    ok.extra_sbatch = vec!["--qos=high".into(), "--exclude=n3".into()];
    ok.image = Some("/lustre/img.sqsh".into());
    ok.labels.insert("arch".into(), "dino".into());
    ok.labels.insert("action".into(), "train".into());
    ok.completion_check = CompletionCheck::StatusJson;
    ok.validate().unwrap();
    assert_eq!(ok.id_label(), "dino-train");
    assert_eq!(spec().id_label(), "hello");
    let json = serde_json::to_string(&ok).unwrap();
    assert!(json.contains("\"completion_check\":\"status_json\""));
}

#[test]
fn digest_is_stable_and_sensitive() {
    let a = spec();
    let mut b = spec();
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.digest().len(), 64);
    b.env.insert("A".into(), "1".into());
    assert_ne!(a.digest(), b.digest());
    // Map order in the source does not matter.
    let x = JobSpec::from_yaml_str("name: a\ncommand: b\nenv: {A: '1', B: '2'}\n").unwrap();
    let y = JobSpec::from_yaml_str("name: a\ncommand: b\nenv: {B: '2', A: '1'}\n").unwrap();
    assert_eq!(x.digest(), y.digest());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn text_parsers_never_panic(s in any::<String>()) {
            let _ = WallTime::parse(&s);
            let _ = crate::image::ImageRef::parse(&s);
            let _ = crate::storage::StorageUri::parse(&s);
            let _ = crate::storage::MountSpec::parse(&s);
            let _ = crate::storage::RemotePath::parse(&s);
            let _ = JobSpec::from_yaml_str(&s);
            let _ = JobSpec::from_json_str(&s);
            let _ = validate_safe_name("x", &s);
            let id = crate::record::JobId::mint(&s);
            prop_assert!(crate::record::JobId::parse(id.as_str()).is_ok());
        }

        #[test]
        fn wall_times_round_trip(secs in 60u64..(400 * 86400)) {
            let w = WallTime::from_secs(secs);
            prop_assert_eq!(WallTime::parse(&w.to_slurm()).unwrap(), w);
        }

        #[test]
        fn resolve_never_panics_and_keeps_its_invariants(
            nodes in proptest::option::of(any::<u32>()),
            gpus in proptest::option::of(prop_oneof![0u32..40, any::<u32>()]),
            per in proptest::option::of(prop_oneof![0u32..10, any::<u32>()]),
            mins in 0u64..300,
        ) {
            let mut s = JobSpec::new("p", "true");
            s.nodes = nodes;
            s.gpus = gpus;
            s.gpus_per_node = per;
            s.time = Some(WallTime::from_minutes(mins));
            if let Ok(r) = s.resolve(&SpecDefaults::default()) {
                prop_assert_eq!(u64::from(r.gpus), u64::from(r.nodes) * u64::from(r.gpus_per_node));
                prop_assert!(r.gpus_per_node <= 8 && r.nodes >= 1);
                prop_assert_eq!(r.exclusive, r.gpus_per_node == 8);
                prop_assert!(r.child_timeout_secs < r.wall.as_secs() && r.child_timeout_secs > 0);
                prop_assert!(r.wall <= WallTime::from_hours(4));
                if let Some(g) = gpus { prop_assert_eq!(r.gpus, g); }
            }
        }
    }
}

#[test]
fn unquoted_yaml_times_are_read_as_slurm_times() {
    let s =
        JobSpec::from_yaml_str("name: a\ncommand: b\ntime: 04:00:00\nchild_timeout: 03:00:00\n")
            .unwrap();
    assert_eq!(s.time.unwrap().to_slurm(), "04:00:00");
    assert_eq!(
        s.resolve(&SpecDefaults::default())
            .unwrap()
            .child_timeout_secs,
        10_800
    );
}

#[test]
fn force_reconvert_latest_is_for_floating_registry_images_only() {
    let mut spec = JobSpec::new("j", "true");
    spec.force_reconvert_latest = true;
    for (image, ok) in [
        (None, false),
        (Some("nvcr.io/nvidia/tao:5"), false),
        (Some("/lustre/img.sqsh"), false),
        (Some("nvcr.io/nvidia/tao:latest"), true),
        (Some("registry.example.com:5000/team/img"), true),
    ] {
        spec.image = image.map(str::to_string);
        let result = spec.validate();
        assert_eq!(result.is_ok(), ok, "{image:?}: {result:?}");
        if let Err(err) = result {
            assert!(err.to_string().contains("force_reconvert_latest"), "{err}");
        }
    }
    spec.image = Some("nvcr.io/nvidia/tao:latest".into());
    spec.allow_registry_image = true;
    assert!(spec.validate().is_err());
    let yaml =
        "name: j\ncommand: 'true'\nimage: nvcr.io/x/y:latest\nforce_reconvert_latest: true\n";
    assert!(JobSpec::from_yaml_str(yaml).unwrap().force_reconvert_latest);
}

/// Issue 14, point 5: a one-minute smoke test is a valid job (its child timeout is
/// counted in seconds, not refused for not filling a whole minute).
#[test]
fn a_one_minute_smoke_test_is_accepted() {
    let mut s = spec();
    s.time = Some(WallTime::parse("00:01:00").unwrap());
    let r = s.resolve(&SpecDefaults::default()).unwrap();
    assert_eq!(r.wall.as_secs(), 60);
    let mut s = spec();
    s.time = Some(WallTime::parse("00:02:00").unwrap());
    s.child_timeout = Some(WallTime::parse("00:00:30").unwrap());
    assert!(s.resolve(&SpecDefaults::default()).is_ok());
}

#[test]
fn an_array_plan_of_a_sweep() {
    let spec = JobSpec::from_yaml_str(
        "name: s\ncommand: echo $LR\nsweep: {LR: [0.1, 0.01]}\narray: {max_parallel: 1}\n",
    )
    .unwrap();
    let plan = spec.array_plan().unwrap().unwrap();
    assert_eq!(
        (plan.indices.to_string(), plan.max_parallel),
        ("0-1".to_string(), Some(1))
    );
    assert_eq!(spec.sweep_point(1).unwrap()["LR"], "0.01");
}
