//! Waiting, through a transport, until a remote process is gone (a command the transport abandoned).

use std::time::{Duration, Instant};

use slurm_core::transport::{Command, Transport};

/// Poll `pgrep -f ^COMMAND_LINE$` through `transport` until nothing matches, or panic
/// with `what` after ten seconds.
pub async fn wait_until_gone<T: Transport + ?Sized>(transport: &T, command_line: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let pattern = format!("^{command_line}$");
    loop {
        let out = transport
            .run(&Command::new("pgrep").arg("-f").arg(pattern.as_str()))
            .await
            .unwrap();
        if out.status == 1 {
            return;
        }
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
