import Testing
import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import Viewfinder
@testable import ViewfinderV4L2
@testable import ViewfinderSinks
import ViewfinderTestSupport

/// Issue 15: a camera that fails mid-dump must never lose the frames already written.
///
/// The VM tier saw `viewfinder dump` report N frames written while the file held none: the session
/// watches a disconnected camera and starts again when it opens (vivid's fatal streaming error
/// leaves it openable at once), and the restart started the dump output again, which created the
/// file anew (`--force`: truncated) before the command's `stopRunning` ended the second run.
@Suite(.serialized) struct DumpDisconnectTests {
    /// The shapes of a failure: after how many written frames, whether the camera opens again (and
    /// how soon), and how long the caller takes to stop after the run ended (the CLI stops at once).
    struct Case: CustomStringConvertible, Sendable {
        var framesBefore: Int
        var comesBack: Bool
        var backAfterMicroseconds: UInt32
        var stopAfterMicroseconds: UInt32
        var description: String { "fail after \(framesBefore) frames, \(comesBack ? "back after \(backAfterMicroseconds / 1000) ms" : "gone"), stop after \(stopAfterMicroseconds / 1000) ms" }
    }

    static let cases: [Case] = [
        Case(framesBefore: 3, comesBack: true, backAfterMicroseconds: 0, stopAfterMicroseconds: 0),
        Case(framesBefore: 10, comesBack: true, backAfterMicroseconds: 0, stopAfterMicroseconds: 150_000),
        Case(framesBefore: 25, comesBack: true, backAfterMicroseconds: 20_000, stopAfterMicroseconds: 300_000),
        Case(framesBefore: 40, comesBack: true, backAfterMicroseconds: 0, stopAfterMicroseconds: 400_000),
        Case(framesBefore: 7, comesBack: true, backAfterMicroseconds: 120_000, stopAfterMicroseconds: 250_000),
        Case(framesBefore: 15, comesBack: false, backAfterMicroseconds: 0, stopAfterMicroseconds: 200_000),
        Case(framesBefore: 1, comesBack: true, backAfterMicroseconds: 0, stopAfterMicroseconds: 500_000),
        Case(framesBefore: 30, comesBack: false, backAfterMicroseconds: 0, stopAfterMicroseconds: 0),
    ] + (0..<16).map { i in
        // More timings, spread over the fault's moment, the camera's return and the stop.
        let back: UInt32? = [nil, 0, 5_000, 60_000, 150_000][i % 5]
        return Case(framesBefore: [1, 2, 4, 8, 16, 32, 64][i % 7], comesBack: back != nil, backAfterMicroseconds: back ?? 0,
                    stopAfterMicroseconds: [0, 80_000, 250_000][i % 3])
    }

    /// Runs `dump` as the CLI does (start, wait until the fault ends the run, stop) while another thread
    /// fails the camera once `framesBefore` frames are written, then checks the file: it replays,
    /// it holds exactly the frames the output reported written, every checksum holds, the frames of
    /// the first run are all there in order (those written before the fault included), and the
    /// session reported the fault once as a typed error.
    @Test(arguments: cases)
    func aCameraFailingMidDumpKeepsEveryFrameWritten(_ c: Case) throws {
        let dir = NSTemporaryDirectory() + "vf-dump-disconnect-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/f.vfdump"
        // A file from an earlier run: --force overwrites it (and must only do so once).
        FileManager.default.createFile(atPath: path, contents: Data("old".utf8))

        let kernel = makeKernel()
        kernel.autoProduce = true
        let session = CaptureSession(logger: quietLogger)
        try session.addInput(CaptureDeviceInput(device: CaptureDevice(source: try makeCamera(kernel))))
        let out = RawDumpOutput(path: path, overwrite: true, device: "/dev/video0", logger: quietLogger)
        try session.addOutput(out)
        try session.setSessionPreset(.inputPriority)
        let errors = LockedBox<[any Error]>([])
        session.onEvent { e in if let error = e.error { errors.withLock { $0.append(error) } } }

        try session.startRunning()
        let writtenAtFault = LockedBox(-1)
        let injector = Thread {
            let deadline = Date().addingTimeInterval(10)
            while out.framesWritten < c.framesBefore && Date() < deadline { usleep(500) }
            writtenAtFault.withLock { $0 = out.framesWritten }
            kernel.disconnect()
            if c.comesBack {
                if c.backAfterMicroseconds > 0 { usleep(c.backAfterMicroseconds) }
                kernel.reconnect()
            }
        }
        injector.start()
        // Wait for the fault to end the first run (the session reports it as its runtime error).
        // Not `session.waitUntilFinished()`: when the camera comes back at once, the session may
        // have started again before this thread asks for its engine, and that run only ends by
        // the stop — under ASan on a loaded machine the test then waited forever on a dump that
        // grew to 55 GB.
        let deadline = Date().addingTimeInterval(30)
        while errors.withLock({ $0.isEmpty }) && Date() < deadline { usleep(1_000) }
        if c.stopAfterMicroseconds > 0 { usleep(c.stopAfterMicroseconds) }
        session.stopRunning()
        session.deliverPendingEvents()

        let atFault = writtenAtFault.withLock { $0 }
        #expect(atFault >= c.framesBefore, "\(c): the fault was never injected")
        #expect(out.error == nil, "\(c): \(String(describing: out.error))")
        let written = out.framesWritten
        #expect(written >= atFault, "\(c): \(written) frames reported written, \(atFault) were before the fault")

        // The file: a clean index, every frame the output counted, every checksum good.
        let reader = try RawDumpReader(path: path, verify: true)
        #expect(reader.damage == nil, "\(c): \(String(describing: reader.damage))")
        #expect(reader.frameCount == written, "\(c): the dump holds \(reader.frameCount) frames, \(written) reported written")
        let frame = Frame(capacity: reader.format.maxByteCount, format: reader.format)
        var sequences: [UInt64] = []
        var stamps: [UInt64] = []
        for i in 0..<reader.frameCount {
            try reader.read(i, into: frame)
            // The fake kernel writes its sequence number in each frame's first 4 bytes (a camera
            // that opens again counts from 0; the session's sequence goes on).
            stamps.append(UInt64(frame.data.loadUnaligned(as: UInt32.self)))
            sequences.append(frame.sequence)
        }
        // The first run's frames come first (those written before the fault included), in order.
        #expect(sequences.count >= atFault)
        #expect(Array(stamps.prefix(atFault)) == Array(sequences.prefix(atFault)), "\(c): the first run's frames are not the dump's first")
        #expect(zip(sequences, sequences.dropFirst()).allSatisfy { $0 < $1 }, "\(c): sequences out of order: \(sequences)")

        // The file replays as a device, every frame delivered.
        #expect(try replayedFrames(path) == written, "\(c)")

        // One typed error: the disconnection (a run after the camera came back ends by the stop).
        let typed = errors.withLock { $0 }
        #expect(typed.count == 1, "\(c): \(typed)")
        #expect(typed.first.map { ($0 as? DeviceError) == .disconnected(device: "/dev/video0") } ?? false, "\(c): \(typed)")
    }

    /// Replays `path` unpaced (`dump:FILE,paced=false`) and returns the frames delivered.
    func replayedFrames(_ path: String) throws -> Int {
        let session = CaptureSession(logger: quietLogger)
        try session.addInput(CaptureDeviceInput(device: CaptureDevice(source: try DumpSource(device: "dump:\(path),paced=false"))))
        try session.addOutput(NullConsumer())
        try session.setSessionPreset(.inputPriority)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        return Int(session.statistics?.delivered ?? 0)
    }

    /// A run in another format cannot append to the dump: it fails with a typed error and the
    /// dump keeps what it held, readable.
    @Test func aRestartInAnotherFormatLeavesTheDumpAsItWas() throws {
        let dir = NSTemporaryDirectory() + "vf-dump-restart-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/f.vfdump"
        let out = RawDumpOutput(path: path, device: "test", logger: quietLogger)
        let a = FrameFormat(.yuyv, width: 64, height: 48)
        let interval = FrameInterval(fps: 30)
        try out.start(configuration: StreamConfiguration(format: a, interval: interval, bufferCount: 4))
        let f = Frame(capacity: a.maxByteCount, format: a)
        f.bytesUsed = a.maxByteCount
        for i in 0..<5 {
            memset(f.data, Int32(i), f.bytesUsed)
            f.sequence = UInt64(i)
            out.consume(f)
        }
        out.finish(error: nil)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        // The same format again appends.
        try out.start(configuration: StreamConfiguration(format: a, interval: interval, bufferCount: 4))
        for i in 5..<8 {
            memset(f.data, Int32(i), f.bytesUsed)
            f.sequence = UInt64(i)
            out.consume(f)
        }
        out.finish(error: nil)
        #expect(out.framesWritten == 8)
        let reader = try RawDumpReader(path: path, verify: true)
        #expect(reader.usedFooterIndex && reader.damage == nil)
        #expect(reader.entries.map(\.sequence) == Array(0..<8))
        for i in 0..<8 {
            try reader.read(i, into: f)
            #expect(f.bytes.allSatisfy { $0 == UInt8(i) }, "frame \(i)")
        }
        #expect(before.count < (try Data(contentsOf: URL(fileURLWithPath: path))).count)
        let after8 = try Data(contentsOf: URL(fileURLWithPath: path))
        // Another format: refused, typed, and the file is untouched.
        let b = FrameFormat(.yuyv, width: 32, height: 24)
        #expect(throws: DumpError.self) { try out.start(configuration: StreamConfiguration(format: b, interval: interval, bufferCount: 4)) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == after8)
        #expect(try RawDumpReader(path: path).frameCount == 8)
    }
}
