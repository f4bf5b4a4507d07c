import Foundation
import Testing
import Viewfinder
@testable import ViewfinderSinks
#if canImport(Glibc)
import Glibc
#endif

/// Environment variable that turns the helper test below into the recording child of the
/// `kill -9` test.
private let childEnv = "VF_SINKS_CRASH_CHILD"

@Suite(.serialized) struct MovieCrashSafetyTests {
    let format = FrameFormat(.yuyv, width: 320, height: 240)

    /// Not a test of its own: the child process of `killedRecordingPlaysUpToTheLastSecond`, which
    /// re-runs this test binary with the environment variable set. It records at 30 fps in real
    /// time and publishes how many frames it has handed to the movie output, until it is killed.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childEnv] != nil))
    func crashChildRecorder() throws {
        let path = ProcessInfo.processInfo.environment[childEnv]!
        let progress = open(path + ".progress", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let output = MovieFileOutput()
        try output.start(configuration: StreamConfiguration(format: format, interval: FrameInterval(fps: 30), bufferCount: 8))
        try output.startRecording(to: path, delegate: nil)
        let pool = FramePool(format: format, count: 4)
        let t0 = monotonicNanoseconds()
        for i in 0..<100_000 {
            let f = pool.acquire()!
            fillFrame(f, index: i)
            f.timestamp = Timestamp(nanoseconds: t0 + UInt64(i) * 33_333_333)
            output.consume(f)
            f.release()
            var n = UInt64(i + 1)
            _ = pwrite(progress, &n, 8, 0)
            sleepUntil(monotonicNanoseconds: t0 + UInt64(i + 1) * 33_333_333)
        }
    }

    @Test func killedRecordingPlaysUpToTheLastSecond() throws {
        let dir = makeTempDirectory()
        let path = dir + "/killed.mov"
        let child = Process()
        child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        child.arguments = ["--testing-library", "swift-testing", "--filter", "crashChildRecorder"]
        child.environment = ProcessInfo.processInfo.environment.merging([childEnv: path]) { $1 }
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try child.run()
        // Let it record about 2.5 s, then kill it without warning.
        let deadline = monotonicNanoseconds() + 30_000_000_000
        var consumed: UInt64 = 0
        while monotonicNanoseconds() < deadline {
            usleep(50_000)
            if let d = FileManager.default.contents(atPath: path + ".progress"), d.count == 8 {
                consumed = d.withUnsafeBytes { $0.load(as: UInt64.self) }
                if consumed >= 75 { break }
            }
        }
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        #expect(child.terminationReason == .uncaughtSignal)
        let d = try #require(FileManager.default.contents(atPath: path + ".progress"))
        consumed = d.withUnsafeBytes { $0.load(as: UInt64.self) }
        #expect(consumed >= 75)

        let probe = try ffprobe(path)
        let v = try #require(probe.stream("video"))
        let frames = try #require(intValue(v["nb_read_frames"]))
        // At most one second (30 frames) plus the frames inside the encoder pool is lost.
        #expect(frames <= Int(consumed))
        #expect(frames >= Int(consumed) - 30 - 6, "file has \(frames) of \(consumed) frames")
        let duration = try #require(doubleValue(v["duration"]))
        #expect(abs(duration - Double(frames) / 30) < 0.01, "duration \(duration) for \(frames) frames")
        #expect(try ffmpegDecodeErrors(path) == "")
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Mounts a tmpfs of `size` at a new directory; nil (test skipped) when mounting is not allowed.
    func mountSmallDisk(_ size: String) -> String? {
        let dir = makeTempDirectory("smalldisk")
        guard let r = try? run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", dir]), r.0 == 0 else {
            try? FileManager.default.removeItem(atPath: dir)
            return nil
        }
        return dir
    }
    func unmount(_ dir: String) {
        _ = try? run("/bin/umount", [dir])
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func fullDiskEndsWithAnErrorAndAPlayableFile() throws {
        guard let dir = mountSmallDisk("2m") else {
            print("skipping the full-disk test: cannot mount a tmpfs here (needs root)")
            return
        }
        defer { unmount(dir) }
        let path = dir + "/full.mov"
        let output = MovieFileOutput()
        let events = RecordingEvents()
        try output.start(configuration: StreamConfiguration(format: format, interval: FrameInterval(fps: 30), bufferCount: 8))
        try output.startRecording(to: path, delegate: events)
        let pool = FramePool(format: format, count: 4)
        feed(output, pool: pool, range: 0..<150, noise: 60)  // about twice 2 MB
        output.finish(error: nil)
        let (_, summary, error) = try #require(events.finished.first)
        #expect(error == .diskFull(path: path))
        #expect(summary.reason == .diskFull)
        #expect(summary.successfullyFinished)
        #expect(summary.frames > 10)
        let probe = try ffprobe(path)
        let v = try #require(probe.stream("video"))
        #expect(intValue(v["nb_read_frames"]) == summary.frames)
        #expect(abs((doubleValue(v["duration"]) ?? 0) - Double(summary.frames) / 30) < 0.01)
        #expect(try ffmpegDecodeErrors(path) == "")
    }

    @Test func minimumFreeSpaceStopsBeforeTheDiskIsFull() throws {
        guard let dir = mountSmallDisk("3m") else {
            print("skipping the free-space test: cannot mount a tmpfs here (needs root)")
            return
        }
        defer { unmount(dir) }
        let path = dir + "/low.mov"
        var s = MovieOutputSettings()
        s.minimumFreeDiskSpace = 1 << 20
        let output = MovieFileOutput(settings: s)
        let events = RecordingEvents()
        try output.start(configuration: StreamConfiguration(format: format, interval: FrameInterval(fps: 30), bufferCount: 8))
        try output.startRecording(to: path, delegate: events)
        let pool = FramePool(format: format, count: 4)
        feed(output, pool: pool, range: 0..<150, noise: 60)
        output.finish(error: nil)
        let (_, summary, error) = try #require(events.finished.first)
        #expect(error == .minimumFreeDiskSpaceReached(bytes: 1 << 20))
        #expect(summary.reason == .diskSpaceLow)
        #expect(summary.successfullyFinished)
        #expect((freeDiskSpace(at: dir) ?? 0) >= 1 << 20)
        let v = try #require(try ffprobe(path).stream("video"))
        #expect(intValue(v["nb_read_frames"]) == summary.frames)
    }

    @Test func dumpOnAFullDiskKeepsEveryFrameWritten() throws {
        guard let dir = mountSmallDisk("2m") else {
            print("skipping the full-disk dump test: cannot mount a tmpfs here (needs root)")
            return
        }
        defer { unmount(dir) }
        let path = dir + "/full.vfdump"
        let out = RawDumpOutput(path: path)
        let failures = LockedBox(0)
        out.onFailure = { _ in failures.withLock { $0 += 1 } }
        try out.start(configuration: StreamConfiguration(format: format, interval: FrameInterval(fps: 30), bufferCount: 8))
        let pool = FramePool(format: format, count: 4)
        var sent: [[UInt8]] = []
        feed(out, pool: pool, range: 0..<30, noise: 250) { f, _ in sent.append(Array(f.bytes)) }  // 150 KiB each, incompressible
        out.finish(error: nil)
        #expect(out.error as? SinkError == .diskFull(path: path))
        #expect(failures.withLock { $0 } == 1, "the failure is told once, when it happens")
        #expect(out.framesWritten > 5 && out.framesWritten < 30)
        #expect(out.framesDropped == 30 - out.framesWritten)
        let reader = try RawDumpReader(path: path)
        #expect(reader.frameCount == out.framesWritten)
        let frame = Frame(capacity: format.maxByteCount, format: format)
        for i in 0..<reader.frameCount {
            try reader.read(i, into: frame)
            #expect(Array(frame.bytes) == sent[i])
        }
    }
}
