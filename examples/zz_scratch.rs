//! scratch profiling (not committed)
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use async_trait::async_trait;
use slurm_core::backend::{Backend, SubmitOptions};
use slurm_core::transport::{Command, Output, Transport};
use slurm_run_testsupport::backend;

#[derive(Debug)]
struct Timed<T> { inner: T, last: Mutex<Vec<(String, Duration)>> }
#[async_trait]
impl<T: Transport> Transport for Timed<T> {
    async fn run(&self, c: &Command) -> slurm_core::Result<Output> {
        let s = Instant::now();
        let r = self.inner.run(c).await;
        self.last.lock().unwrap().push((c.label(), s.elapsed()));
        r
    }
}
fn med(mut v: Vec<Duration>) -> f64 { v.sort(); v[v.len()/2].as_secs_f64()*1000.0 }

#[tokio::main]
async fn main() {
    let h = backend::harness();
    {
        use slurm_core::slurm::{SlurmBackend, SlurmConfig};
        let tb = &h.testbed;
        let ssh = slurm_ssh::Ssh2Transport::new(slurm_ssh::Ssh2TransportBuilder::from_lookup(tb.lookup()).unwrap()).unwrap();
        let timed = Arc::new(Timed { inner: ssh, last: Mutex::new(vec![]) });
        let dir = tempfile::tempdir().unwrap();
        let config = SlurmConfig::builder().with_env_from(tb.lookup()).with_state_dir(dir.path()).build().unwrap();
        let b = SlurmBackend::new(Arc::clone(&timed), slurm_render::HandlebarsRenderer::new(), slurm_core::FileRecordStore::new(dir.path()).unwrap(), config);
        let mut spec = backend::small_spec("benchsubmit", "true");
        spec.extra_sbatch = vec!["--begin=now+1hour".into()];
        b.submit(&spec, SubmitOptions::default()).await.unwrap();
        let mut tot = vec![]; let mut rt = vec![]; let mut ids = vec![];
        for _ in 0..25 {
            timed.last.lock().unwrap().clear();
            let s = Instant::now();
            let r = b.submit(&spec, SubmitOptions::default()).await.unwrap();
            tot.push(s.elapsed());
            ids.push(r.backend_ref.unwrap().native_id);
            let l = timed.last.lock().unwrap();
            assert_eq!(l.len(), 1, "{l:?}");
            rt.push(l[0].1);
        }
        println!("timed: total {:.2} round trip {:.2}", med(tot), med(rt));
        timed.run(&Command::new("scancel").args(ids)).await.unwrap();
    }
    let t = &h.transport;
    let n = 25;
    let mut spec = backend::small_spec("benchsubmit", "true");
    spec.extra_sbatch = vec!["--begin=now+1hour".into()];
    h.backend.submit(&spec, SubmitOptions::default()).await.unwrap();
    let bare = Command::new("sbatch").args(["--parsable", "--begin=now+1hour", "--output=/dev/null", "--wrap=true"]);
    let (mut lib, mut b, mut tr, mut tru, mut bs) = (vec![], vec![], vec![], vec![], vec![]);
    let mut ids = vec![];
    for _ in 0..n {
        let s = Instant::now();
        let r = h.backend.submit(&spec, SubmitOptions::default()).await.unwrap();
        lib.push(s.elapsed());
        ids.push(r.backend_ref.unwrap().native_id);
        let labels = t.labels(); let _ = labels;
        let s = Instant::now();
        let o = t.run(&bare).await.unwrap();
        b.push(s.elapsed());
        ids.push(o.stdout_text().trim().to_string());
        let s = Instant::now();
        t.run(&Command::new("true")).await.unwrap();
        tru.push(s.elapsed());
        let s = Instant::now();
        t.run(&Command::bash_script("true", Vec::<String>::new())).await.unwrap();
        bs.push(s.elapsed());
        let s = Instant::now();
        t.run(&Command::new("true").stdin(vec![b'x'; 4000])).await.unwrap();
        tr.push(s.elapsed());
    }
    println!("library submit {:.2} ms; bare sbatch {:.2}; true {:.2}; bash -c true {:.2}; true+4KB stdin {:.2}", med(lib), med(b), med(tru), med(bs), med(tr));
    // local parts
    let script = std::fs::read_to_string("/dev/null").unwrap();
    let _ = script;
    let mut lint = vec![];
    let text = "#!/bin/bash\n#SBATCH --x\necho hi\n".repeat(50);
    for _ in 0..n { let s = Instant::now(); slurm_render::check_syntax(&text).unwrap(); lint.push(s.elapsed()); }
    println!("bash -n {:.2} ms", med(lint));
    let _ = Arc::new(0);
    t.run(&Command::new("scancel").args(ids)).await.unwrap();
}
