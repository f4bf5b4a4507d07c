import Foundation
import Testing
import Viewfinder
import ViewfinderSim
@testable import ViewfinderSinks

/// Slow storage (issue 15): a live camera records a dump and a movie while their disk stalls
/// (``StorageStalls`` holds back every write and `fdatasync` of files in the directory; the
/// sinks' own write path runs). Within the outputs' buffer budget nothing is lost; beyond it the
/// frames that did not fit are dropped at those outputs only, counted as `storage_backlog`, and
/// the files stay complete.
@Suite("Slow storage: a stalling disk and the outputs' buffer budget")
struct SlowStorageTests {
    struct Run {
        var statistics: EngineStatistics
        var dump: RawDumpOutput
        var dumpStats: ConsumerStatistics
        var movieStats: ConsumerStatistics
        var summary: MovieRecordingSummary?
        var movieError: MovieRecordingError?
        /// The sequence numbers of the frames the third output (never behind) was given.
        var witnessSequences: [UInt64]
        var dir: String
    }

    /// `frames` frames of the paced (live) sim at 30 fps; the disk stalls for `stall` seconds from
    /// 0.7 s after the start.
    func record(frames: Int, stall: Double, budget: BufferBudget?, name: String = #function) throws -> Run {
        let dir = makeTempDirectory(name)
        let cam = try SimCamera(deviceString: "sim:paced=true,seed=7,width=320,height=240,fps=30,frames=\(frames)")
        let movie = MovieFileOutput()
        movie.bufferBudget = budget
        let events = RecordingEvents()
        try movie.startRecording(to: dir + "/m.mov", delegate: events)
        let dump = RawDumpOutput(path: dir + "/d.vfdump")
        dump.bufferBudget = budget
        let witness = HashingWitness()
        let consumers: [any FrameConsumer] = [movie, dump, witness]
        let buffers = CaptureEngine.buffersNeeded(stages: [], consumers: consumers, options: EngineOptions())
        let cfg = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, fps: 30, bufferCount: buffers))
        let engine = CaptureEngine(source: cam, configuration: cfg, stages: [], consumers: consumers)
        try engine.start()
        usleep(700_000)
        StorageStalls.stall(directory: dir, until: monotonicNanoseconds() &+ UInt64(stall * 1e9))
        defer { StorageStalls.end(directory: dir) }
        #expect(engine.waitUntilFinished(timeoutSeconds: Double(frames) / 30 + 60))
        #expect(events.waitFinished(timeout: 30))
        let f = events.finished.first
        let st = engine.statistics
        let seen = witness.frames
        print("slow storage: stall \(stall) s, budget \(budget.map { "\($0.seconds) s" } ?? "none"): delivered \(st.delivered), source drops \(st.drops.byName), dump written \(dump.framesWritten) drops \(st.consumers[1].drops.byName), movie frames \(f?.1.frames ?? -1) drops \(st.consumers[0].drops.byName), witness \(seen.count)")
        return Run(statistics: engine.statistics, dump: dump, dumpStats: engine.statistics.consumers[1], movieStats: engine.statistics.consumers[0],
                   summary: f?.1, movieError: f?.2, witnessSequences: seen.map(\.sequence), dir: dir)
    }

    /// The dump's frames are in capture order with no repeats, and there are as many as it wrote.
    func checkDump(_ r: Run) throws -> [UInt64] {
        let reader = try RawDumpReader(path: r.dir + "/d.vfdump")
        #expect(reader.damage == nil)
        #expect(reader.frameCount == r.dump.framesWritten)
        let seqs = reader.entries.map(\.sequence)
        #expect(zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 }, "dump sequences out of order")
        return seqs
    }

    @Test("a 1.5 s stall within the 2 s budget: no frame lost, every frame in both files in order")
    func withinBudget() throws {
        let r = try record(frames: 90, stall: 1.5, budget: .standard)
        let delivered = Int(r.statistics.delivered)
        #expect(delivered > 0)
        // The camera never ran short of buffers, and the other output got everything.
        #expect(r.statistics.drops[.outOfBuffers] == 0)
        #expect(r.witnessSequences.count == delivered)
        #expect(r.dumpStats.drops.total == 0, "\(r.dumpStats.drops.byName)")
        #expect(r.movieStats.drops.total == 0, "\(r.movieStats.drops.byName)")
        #expect(r.dump.framesWritten == delivered)
        #expect(r.dump.framesDroppedForBacklog == 0)
        #expect(r.dump.error == nil)
        let seqs = try checkDump(r)
        #expect(seqs.count == delivered)
        // Exactly the frames the engine delivered (the other output saw them): a frame the paced sim
        // itself missed on a loaded machine (a `driver_gap` at the source) is no gap in the dump.
        #expect(seqs == r.witnessSequences, "the dump's sequences differ from the delivered ones")
        let s = try #require(r.summary)
        #expect(r.movieError == nil)
        #expect(s.frames == delivered)
        // The movie counts every frame it did not get: here only the paced sim's own misses.
        #expect(s.droppedFrames == Int(r.statistics.drops.total), "\(r.statistics.drops.byName)")
        let probe = try ffprobe(r.dir + "/m.mov")
        #expect(probe.stream("video")?["nb_read_frames"] as? String == "\(delivered)")
    }

    @Test("a 3 s stall past a 0.5 s budget: drops counted as storage_backlog, files complete, books balanced")
    func beyondBudget() throws {
        let r = try record(frames: 150, stall: 3, budget: BufferBudget(seconds: 0.5))
        let delivered = Int(r.statistics.delivered)
        #expect(r.statistics.drops[.outOfBuffers] == 0)
        #expect(r.witnessSequences.count == delivered)
        // The dump: what it wrote and what it dropped for its backlog make up what it was given.
        let dumpBacklog = Int(r.dumpStats.drops[.storageBacklog])
        #expect(dumpBacklog > 0)
        #expect(r.dump.framesDroppedForBacklog == dumpBacklog)
        #expect(r.dumpStats.drops.total == UInt64(dumpBacklog), "\(r.dumpStats.drops.byName)")
        #expect(r.dump.framesWritten + dumpBacklog == delivered)
        #expect(r.dump.error == nil)
        let seqs = try checkDump(r)
        #expect(seqs.count + dumpBacklog == delivered)
        // The movie: the same books, and a file that plays every frame it holds.
        let movieBacklog = Int(r.movieStats.drops[.storageBacklog])
        #expect(movieBacklog > 0)
        #expect(r.movieStats.drops.total == UInt64(movieBacklog), "\(r.movieStats.drops.byName)")
        let s = try #require(r.summary)
        #expect(r.movieError == nil)
        #expect(s.successfullyFinished)
        // Its own backlog drops and any frame the paced sim itself missed (a loaded machine).
        #expect(s.droppedFrames == movieBacklog + Int(r.statistics.drops.total), "\(r.statistics.drops.byName)")
        #expect(s.frames + movieBacklog == delivered)
        let probe = try ffprobe(r.dir + "/m.mov")
        #expect(probe.stream("video")?["nb_read_frames"] as? String == "\(s.frames)")
        #expect(try ffmpegDecodeErrors(r.dir + "/m.mov").isEmpty)
    }

    @Test("no budget (as before it existed): the ring's 16 frames, then ring_full drops; the camera keeps its buffers")
    func withoutBudget() throws {
        let r = try record(frames: 150, stall: 3, budget: nil)
        let delivered = Int(r.statistics.delivered)
        #expect(r.statistics.drops[.outOfBuffers] == 0)
        #expect(r.witnessSequences.count == delivered)
        #expect(r.dumpStats.drops[.ringFull] > 0)
        #expect(r.dumpStats.drops[.storageBacklog] == 0)
        #expect(r.dump.framesWritten + Int(r.dumpStats.drops.total) == delivered)
        _ = try checkDump(r)
    }

    @Test("the budget in frames: seconds at the stream's rate, capped by bytes")
    func budgetFrames() {
        let b = BufferBudget(seconds: 2, maximumBytes: 100 << 20)
        #expect(b.frames(frameBytes: 614_400, intervalNanoseconds: 33_333_333) == 60)
        #expect(b.frames(frameBytes: 4_147_200, intervalNanoseconds: 33_333_333) == 25)
        #expect(BufferBudget.none.frames(frameBytes: 614_400, intervalNanoseconds: 33_333_333) == 0)
        #expect(BufferBudget.standard.maximumBytes <= 512 << 20)
    }
}
