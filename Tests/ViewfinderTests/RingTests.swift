import Testing
import Synchronization
@testable import Viewfinder

/// The SPSC ring: every wrap-around layout, full/empty edges, element lifetimes, and a two-thread
/// stress run. These tests also run under the thread sanitizer (see .ci/run).
@Suite struct RingTests {
    @Test func capacityMustBeAPowerOfTwo() {
        let r = SPSCRing<Int>(capacity: 8)
        #expect(r.capacity == 8)
        #expect(r.isEmpty)
        #expect(r.freeCapacity == 8)
    }

    /// For every starting offset (where head and tail sit relative to the end of the storage) and
    /// every fill level, push then pop and check order, full and empty.
    @Test(arguments: [2, 4, 8])
    func everyWrapAroundLayout(capacity: Int) {
        for offset in 0..<(2 * capacity) {
            for fill in 0...capacity {
                let r = SPSCRing<Int>(capacity: capacity)
                // Move head and tail to `offset`.
                for i in 0..<offset { #expect(r.push(i) == nil); #expect(r.pop() == i) }
                #expect(r.isEmpty)
                for i in 0..<fill { #expect(r.push(1000 + i) == nil, "offset \(offset) fill \(fill)") }
                #expect(r.count == fill)
                if fill == capacity {
                    // Full: the element comes back, nothing is overwritten.
                    #expect(r.push(-1) == -1)
                    #expect(r.count == capacity)
                }
                for i in 0..<fill { #expect(r.pop() == 1000 + i, "offset \(offset) fill \(fill)") }
                #expect(r.pop() == nil)
                #expect(r.isEmpty)
            }
        }
    }

    @Test func interleavedPushPopAcrossManyWraps() {
        let r = SPSCRing<Int>(capacity: 4)
        var next = 0, expected = 0
        for round in 0..<1000 {
            let pushes = round % 5, pops = (round * 7) % 5
            for _ in 0..<pushes where r.push(next) == nil { next += 1 }
            for _ in 0..<pops { if let v = r.pop() { #expect(v == expected); expected += 1 } }
            #expect(r.count == next - expected)
            #expect(r.count <= 4)
        }
    }

    final class Tracked { static let live = Atomic<Int>(0); init() { Self.live.add(1, ordering: .relaxed) }; deinit { Self.live.subtract(1, ordering: .relaxed) } }

    @Test func elementsAreReleasedOnPopAndOnDeinit() {
        let before = Tracked.live.load(ordering: .relaxed)
        do {
            let r = SPSCRing<Tracked>(capacity: 4)
            for _ in 0..<3 { _ = r.push(Tracked()) }
            _ = r.pop()
            #expect(Tracked.live.load(ordering: .relaxed) == before + 2)
            // A rejected element comes back and is not retained by the ring.
            for _ in 0..<2 { _ = r.push(Tracked()) }
            let back = r.push(Tracked())
            #expect(back != nil)
        }
        #expect(Tracked.live.load(ordering: .relaxed) == before)
    }

    /// Two threads pass 10 million sequence numbers through a small ring: order kept, none lost,
    /// none duplicated.
    @Test func twoThreadStressTenMillion() {
        let n = 10_000_000
        let r = SPSCRing<Int>(capacity: 64)
        let producer = EngineThread(name: "ring-producer") {
            var i = 0
            while i < n { if r.push(i) == nil { i += 1 } }
        }
        var expected = 0
        var outOfOrder = 0
        while expected < n {
            if let v = r.pop() {
                if v != expected { outOfOrder += 1 }
                expected = v + 1
            }
        }
        producer.join()
        #expect(outOfOrder == 0)
        #expect(expected == n)
        #expect(r.pop() == nil)
    }
}

/// The frame channel on top of the ring: policies, accounting and wake-ups.
@Suite struct FrameChannelTests {
    func pool(_ n: Int) -> FramePool { FramePool(format: FrameFormat(.grey, width: 4, height: 4), count: n) }

    @Test func dropNewestKeepsQueuedFramesAndCounts() {
        let p = pool(8)
        let drops = DropCounters()
        let ch = FrameChannel(name: "t", capacity: 2, policy: .dropNewest, drops: drops)
        for s in 0..<4 { let f = p.acquire()!; f.sequence = UInt64(s); ch.send(f) }
        #expect(drops[.ringFull] == 2)
        guard case .frame(let a) = ch.receive(timeoutNanoseconds: 0) else { Issue.record("no frame"); return }
        guard case .frame(let b) = ch.receive(timeoutNanoseconds: 0) else { Issue.record("no frame"); return }
        #expect(a.sequence == 0 && b.sequence == 1)
        a.release(); b.release()
        #expect(p.available == 8)
    }

    @Test func dropOldestDeliversTheNewest() {
        let p = pool(8)
        let drops = DropCounters()
        let ch = FrameChannel(name: "t", capacity: 2, policy: .dropOldest, drops: drops)
        for s in 0..<5 { let f = p.acquire()!; f.sequence = UInt64(s); ch.send(f) }
        ch.close()
        var got: [UInt64] = []
        while case .frame(let f) = ch.receive(timeoutNanoseconds: 1_000_000) { got.append(f.sequence); f.release() }
        // Order kept, the newest frame always arrives, and every frame is delivered or counted.
        #expect(got == got.sorted())
        #expect(got.last == 4)
        #expect(UInt64(got.count) + drops[.ringFull] == 5)
        #expect(p.available == 8)
    }

    @Test func waitPolicyLosesNothingAcrossThreads() {
        let p = pool(16)
        let drops = DropCounters()
        let ch = FrameChannel(name: "t", capacity: 4, policy: .wait, drops: drops)
        let n = 20_000
        let producer = EngineThread(name: "producer") {
            for s in 0..<n {
                let f = p.acquire(timeoutNanoseconds: 5_000_000_000)!
                f.sequence = UInt64(s)
                ch.send(f)
            }
            ch.close()
        }
        var expected: UInt64 = 0
        var bad = 0
        loop: while true {
            switch ch.receive(timeoutNanoseconds: 1_000_000_000) {
            case .frame(let f): if f.sequence != expected { bad += 1 }; expected = f.sequence + 1; f.release()
            case .timeout: continue
            case .closed: break loop
            }
        }
        producer.join()
        #expect(bad == 0)
        #expect(expected == UInt64(n))
        #expect(drops.total == 0)
        #expect(p.available == 16)
    }

    @Test func receiveTimesOutWhenIdle() {
        let ch = FrameChannel(name: "t", capacity: 2, policy: .dropNewest, drops: DropCounters())
        let t0 = monotonicNanoseconds()
        guard case .timeout = ch.receive(timeoutNanoseconds: 20_000_000) else { Issue.record("expected timeout"); return }
        #expect(monotonicNanoseconds() - t0 >= 15_000_000)
    }
}

@Suite struct FramePoolTests {
    @Test func recyclesByReferenceCount() {
        let p = FramePool(format: FrameFormat(.yuyv, width: 64, height: 8), count: 2)
        let a = p.acquire()!, b = p.acquire()!
        #expect(p.acquire() == nil)
        a.retain(2)               // two more holders
        a.release(); a.release()  // they let go
        #expect(p.available == 0)
        a.release()               // the last one
        #expect(p.available == 1)
        let c = p.acquire()!
        #expect(c === a)
        #expect(c.referenceCount == 1)
        b.release(); c.release()
        #expect(p.available == 2)
    }

    @Test func frameGeometryOfPlanarFormats() {
        let nv12 = FrameFormat(.nv12, width: 1920, height: 1080)
        #expect(nv12.planeCount == 2)
        #expect(nv12.plane(1).offset == 1920 * 1080)
        #expect(nv12.maxByteCount == 1920 * 1080 * 3 / 2)
        let i420 = FrameFormat(.i420, width: 640, height: 480)
        #expect(i420.plane(2).offset == 640 * 480 + 320 * 240)
        #expect(i420.maxByteCount == 640 * 480 * 3 / 2)
        #expect(FrameFormat(.yuyv, width: 1920, height: 1080).maxByteCount == 1920 * 1080 * 2)
        #expect(FrameFormat(.rgb24, width: 10, height: 10).bytesPerRow == 30)
        #expect(PixelFormat(fourcc: fourCC("YUYV")) == .yuyv)
        #expect(fourCCString(PixelFormat.mjpeg.fourcc) == "MJPG")
    }
}
