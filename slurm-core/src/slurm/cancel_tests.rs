//! Cancel against a mock cluster.

use super::testkit::*;
use crate::backend::Backend;
use crate::state::JobState;

#[tokio::test]
async fn cancel_settles_a_submitting_record_first() {
    // Issue 11, item 2: `cancel` used to say "never accepted" while the job ran.
    let mut remote = MockRemote::new();
    remote
        .expect_run()
        .withf(is_settle)
        .times(1)
        .returning(|c| {
            Ok(settle_answer(
                c,
                |_| Fence::Done(0, "808\n", ""),
                Some(&["808"]),
                Some(&["808"]),
            ))
        });
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&cancelled);
    remote
        .expect_run()
        .withf(|c| c.program() == "scancel")
        .times(1)
        .returning(move |c| {
            assert_eq!(c.get_args(), ["808"]);
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(output(0, "", ""))
        });
    let polled = std::sync::Arc::clone(&cancelled);
    remote.expect_run().withf(is_poll).returning(move |_| {
        Ok(if polled.load(std::sync::atomic::Ordering::SeqCst) {
            // Ended: accounting says how (a job squeue calls ended waits for it).
            output(
                0,
                "@@begin 0\nO 808|CANCELLED|None|n1|x\n@@end 0 0\n@@begin 1\nO 808|808|CANCELLED by 0|0:0|None|2026-11-30T10:00:00|2026-11-30T10:00:01|2026-11-30T10:00:02|n1|x\n@@end 1 0\n",
                "",
            )
        } else {
            poll_answer("808|PENDING|Priority|(null)|x")
        })
    });
    let backend = backend(remote);
    let record = left_submitting(&backend, "tocancel", 0);
    let ended = backend.cancel(&record.id).await.unwrap();
    assert_eq!(ended.state, JobState::Canceled);
    assert_eq!(ended.backend_ref.unwrap().native_id, "808");
}
