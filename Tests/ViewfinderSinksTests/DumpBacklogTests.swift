import Foundation
import Testing
import Viewfinder
import ViewfinderSim
@testable import ViewfinderSinks

/// Adaptive `auto` (issue 12): a dump behind a live camera stores the next frames uncompressed
/// until it has caught up, so compression never makes it drop frames; a non-live source waits for
/// it and every frame is compressed. No timing assertion: the slow compressor is a test seam
/// (`compressionDelayNanoseconds`) far slower than the stream, the stall a `StorageStalls` one.
@Suite("Dump backlog: auto stores frames raw while behind a live source")
struct DumpBacklogTests {
    struct Run {
        var statistics: EngineStatistics
        var dump: RawDumpOutput
        var dumpDrops: DropCounters
        var witness: [(sequence: UInt64, hash: UInt64)]
        var path: String
    }

    /// `device` (the sim) into a dump (`auto`) beside a witness; the dump's compressor takes
    /// `delay` longer per frame, and its disk stalls for `stall` seconds from 0.7 s on.
    func record(_ device: String, fps: Int = 30, frames: Int, delay: Double = 0, stall: Double = 0, name: String = #function) throws -> Run {
        let dir = makeTempDirectory(name)
        let cam = try SimCamera(deviceString: device + ",fps=\(fps),width=320,height=240,frames=\(frames)")
        let dump = RawDumpOutput(path: dir + "/d.vfdump", compression: .auto)
        dump.compressionDelayNanoseconds = UInt64(delay * 1e9)
        let witness = HashingWitness()
        let consumers: [any FrameConsumer] = [dump, witness]
        let buffers = CaptureEngine.buffersNeeded(stages: [], consumers: consumers, options: EngineOptions())
        let cfg = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, fps: Double(fps), bufferCount: buffers))
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: [], consumers: consumers)
        let t0 = monotonicNanoseconds()
        try engine.start()
        if stall > 0 {
            usleep(700_000)
            StorageStalls.stall(directory: dir, until: monotonicNanoseconds() &+ UInt64(stall * 1e9))
        }
        defer { StorageStalls.end(directory: dir) }
        #expect(engine.waitUntilFinished(timeoutSeconds: Double(frames) * (1.0 / Double(fps) + delay) + 120))
        let st = engine.statistics
        print("dump backlog (\(device) at \(fps) fps, \(Double(monotonicNanoseconds() - t0) / 1e9) s, delay \(delay) s, stall \(stall) s): delivered \(st.delivered), source drops \(st.drops.byName), written \(dump.framesWritten), stored raw for backlog \(dump.framesStoredRawForBacklog), ratio \(Double(dump.rawBytesWritten) / Double(max(dump.bytesWritten, 1))), dump drops \(st.consumers[0].drops.byName)")
        return Run(statistics: st, dump: dump, dumpDrops: st.consumers[0].drops, witness: witness.frames, path: dir + "/d.vfdump")
    }

    /// The dump holds exactly the frames the witness was given, each bit-exact (by checksum);
    /// returns its reader.
    @discardableResult
    func checkReplay(_ r: Run) throws -> RawDumpReader {
        let reader = try RawDumpReader(path: r.path)
        #expect(reader.damage == nil)
        #expect(reader.frameCount == r.dump.framesWritten)
        #expect(reader.entries.map(\.sequence) == r.witness.map(\.sequence), "the dump's frames differ from the delivered ones")
        let frame = Frame(capacity: max(reader.maxRawLength, reader.format.maxByteCount), format: reader.format)
        var mismatches = 0
        for (i, w) in r.witness.enumerated() where i < reader.frameCount {
            try reader.read(i, into: frame)
            let h = XXHash64.hash(UnsafeRawBufferPointer(start: frame.data, count: frame.bytesUsed))
            if frame.sequence != w.sequence || h != w.hash { mismatches += 1 }
        }
        #expect(mismatches == 0, "\(mismatches) frames replay differently from what was delivered")
        return reader
    }

    @Test("a compressor slower than the live camera: frames stored raw, none dropped, replay bit-exact")
    func slowCompressorLive() throws {
        // 100 ms per compressed frame against a frame every 33 ms: compressing everything would
        // fall 2 frames further behind with each frame and overflow the ring within a second.
        let r = try record("sim:paced=true,seed=3,noise=0", fps: 30, frames: 90, delay: 0.1)
        let delivered = Int(r.statistics.delivered)
        #expect(delivered > 0)
        #expect(r.dump.framesStoredRawForBacklog > 0)
        #expect(r.dump.framesStoredRawForBacklog < delivered, "it compresses again whenever it has caught up")
        #expect(r.dumpDrops.total == 0, "\(r.dumpDrops.byName)")
        #expect(r.dump.framesDroppedForBacklog == 0)
        #expect(r.dump.framesDropped == 0)
        #expect(r.dump.error == nil)
        #expect(r.dump.framesWritten == delivered)
        #expect(r.witness.count == delivered)
        try checkReplay(r)
    }

    @Test("a disk stall: raw while catching up, compressed again after; nothing dropped, replay bit-exact")
    func stallThenCatchUp() throws {
        let r = try record("sim:paced=true,seed=4,noise=0", fps: 30, frames: 120, stall: 1)
        let delivered = Int(r.statistics.delivered)
        #expect(r.dump.framesStoredRawForBacklog > 0)
        #expect(r.dumpDrops.total == 0, "\(r.dumpDrops.byName)")
        #expect(r.dump.framesWritten == delivered)
        let reader = try checkReplay(r)
        // The last frame came with nothing behind it: compressed, as before the stall.
        let last = try #require(reader.entries.last)
        #expect(last.storedLength < last.rawLength, "the dump did not compress again after catching up")
    }

    @Test("a live camera the dump keeps up with: every frame compressed, none stored raw for backlog")
    func liveKeepingUp() throws {
        // 10 fps: the dump would have to stall for 0.8 s (8 frames) to count as behind, which
        // compressing a 320x240 frame (well under a millisecond) never does, even under ASan.
        let r = try record("sim:paced=true,seed=5,noise=0", fps: 10, frames: 30)
        #expect(r.dump.framesStoredRawForBacklog == 0)
        #expect(r.dumpDrops.total == 0, "\(r.dumpDrops.byName)")
        #expect(r.dump.bytesWritten > 0)
        #expect(Double(r.dump.rawBytesWritten) / Double(r.dump.bytesWritten) > 1.5)
        try checkReplay(r)
    }

    @Test("a non-live source waits for a slow compressor: every frame compressed, the file as small as ever")
    func nonLiveWaits() throws {
        let r = try record("sim:paced=false,seed=6,noise=0", frames: 30, delay: 0.05)
        #expect(r.statistics.delivered == 30)
        #expect(r.dump.framesWritten == 30)
        #expect(r.dump.framesStoredRawForBacklog == 0)
        #expect(Double(r.dump.rawBytesWritten) / Double(r.dump.bytesWritten) > 1.5)
        try checkReplay(r)
    }

    @Test("the writer: frames behind a live source stored as they are, the others split and compressed; all read back bit-exact")
    func writerStoresRawWhenBehind() throws {
        let dir = makeTempDirectory()
        let fmt = FrameFormat(.yuyv, width: 1280, height: 720, bytesPerRow: 2560)
        let w = try RawDumpWriter(path: dir + "/w.vfdump", format: fmt, compression: .auto)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        f.bytesUsed = fmt.maxByteCount
        var hashes: [UInt64] = []
        let behind = [false, true, true, false, true, false]
        for (i, b) in behind.enumerated() {
            fillFrame(f, index: i, noise: 4)
            hashes.append(XXHash64.hash(UnsafeRawBufferPointer(start: f.data, count: f.bytesUsed)))
            try w.append(f, behindLiveSource: b)
        }
        #expect(w.framesStoredRawForBacklog == 3)
        #expect(w.framesSplit == 3)
        try w.close()
        let reader = try RawDumpReader(path: dir + "/w.vfdump")
        #expect(reader.frameCount == behind.count)
        for (i, b) in behind.enumerated() {
            let e = reader.entries[i]
            #expect((e.storedLength == e.rawLength) == b, "frame \(i): stored \(e.storedLength) of \(e.rawLength)")
            try reader.read(i, into: f)
            #expect(XXHash64.hash(UnsafeRawBufferPointer(start: f.data, count: f.bytesUsed)) == hashes[i])
            #expect(f.sequence == UInt64(i))
        }
    }
}
