import Testing
import Foundation
@testable import Viewfinder

/// Joining one engine thread from several threads at once: a session's `waitUntilFinished()` on
/// the caller's thread and a `stopRunning()` from another (a delegate, a signal handler, a pipe
/// whose reader left) both join the engine's threads. A second `pthread_join` of a reaped thread
/// waited forever (`viewfinder run --output -` hung 1 run in 40, 26 Nov). The joins run on their
/// own threads here and the test waits for them with a deadline, so a regression fails the test
/// instead of hanging the suite.
@Suite struct ThreadJoinTests {
    /// Runs `body` on a detached thread; whether it returned within `seconds`.
    private func finishes(within seconds: Double, _ body: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        let t = Thread { body(); done.signal() }
        t.start()
        return done.wait(timeout: .now() + seconds) == .success
    }

    @Test func oneThreadJoinedFromThreeThreadsAtOnceReleasesEveryJoiner() {
        for round in 0..<300 {
            let go = LockedBox(false), ended = LockedBox(false)
            let worker = EngineThread(name: "joined") {
                while !go.withLock({ $0 }) { sched_yield() }
                usleep(200)
                ended.withLock { $0 = true }
            }
            let joiners = LockedBox(0), early = LockedBox(0)
            let ok = finishes(within: 20) {
                let group = DispatchGroup()
                for _ in 0..<3 {
                    group.enter()
                    Thread {
                        worker.join()
                        // join() returned: the thread's body has run to its end.
                        if !ended.withLock({ $0 }) { early.withLock { $0 += 1 } }
                        joiners.withLock { $0 += 1 }
                        group.leave()
                    }.start()
                }
                // The thread ends while the joiners are (most likely) all inside join().
                usleep(UInt32(round % 4) * 100)
                go.withLock { $0 = true }
                group.wait()
            }
            #expect(ok, "round \(round): \(joiners.withLock { $0 }) of 3 joiners returned within 20 s")
            if !ok { return }
            #expect(early.withLock { $0 } == 0, "round \(round): a join returned while the thread still ran")
            worker.join()    // once more, after the others: returns at once
        }
    }

    @Test func detachAfterAJoinBeganDoesNotBlockAndTheJoinStillReturns() {
        let go = LockedBox(false)
        let worker = EngineThread(name: "joined") { while !go.withLock({ $0 }) { usleep(100) } }
        let joined = DispatchSemaphore(value: 0)
        Thread { worker.join(); joined.signal() }.start()
        usleep(20_000)
        #expect(finishes(within: 5) { worker.detach() })
        go.withLock { $0 = true }
        #expect(joined.wait(timeout: .now() + 20) == .success)
    }

    /// A stop requested from inside the run joins the thread it runs on: that join cannot wait,
    /// it returns (the thread is detached), and a join from outside afterwards returns too.
    @Test func aThreadJoiningItselfReturnsAndIsStillReaped() {
        let me = LockedBox<EngineThread?>(nil)
        let returned = DispatchSemaphore(value: 0)
        let t = EngineThread(name: "self-join") {
            var own: EngineThread?
            while own == nil { own = me.withLock { $0 }; if own == nil { usleep(100) } }
            own?.join()
            returned.signal()
        }
        me.withLock { $0 = t }
        #expect(returned.wait(timeout: .now() + 20) == .success)
        #expect(finishes(within: 5) { t.join() })
    }

    /// The CLI's pattern: the main thread waits for the run to end while another thread stops it.
    @Test func waitUntilFinishedAndStopRunningOnTwoThreadsBothReturn() throws {
        for round in 0..<20 {
            let session = CaptureSession()
            let dev = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32"))
            try session.addInput(CaptureDeviceInput(device: dev))
            try session.addOutput(NullConsumer(name: "null"))
            try session.startRunning()
            let ok = finishes(within: 30) {
                let group = DispatchGroup()
                group.enter()
                Thread { session.waitUntilFinished(); group.leave() }.start()
                group.enter()
                Thread { usleep(UInt32(round % 5) * 1000); session.stopRunning(); group.leave() }.start()
                group.wait()
                session.stopRunning()
            }
            #expect(ok, "round \(round): waitUntilFinished/stopRunning did not both return within 30 s")
            if !ok { return }
            // Stopped within a few milliseconds of starting (under a sanitizer, often before the
            // first frame): the books still balance, every captured frame delivered or dropped.
            let stats = try #require(session.statistics)
            #expect(stats.captured == stats.delivered + stats.drops.total, "round \(round)")
        }
    }
}
