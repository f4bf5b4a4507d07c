import Foundation
import Synchronization
import Testing
import Viewfinder
@testable import ViewfinderSinks

/// What a frame with this sequence number holds, as `SyntheticSource` makes it.
private func expectedPixels(_ format: FrameFormat, sequence: Int) -> [UInt8] {
    let f = Frame(capacity: format.maxByteCount, format: format)
    fillFrame(f, index: sequence)
    return [UInt8](UnsafeRawBufferPointer(f.bytes))
}

private func uniqueRingName(_ tag: String = #function) -> String {
    "vftest-\(tag.filter { $0.isLetter })-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
}

/// A live (paced) YUYV test pattern.
private func pacedPattern(width: Int, height: Int, fps: Double, frames: UInt64) throws -> (PatternSource, StreamConfiguration) {
    var o = PatternSource.Options()
    o.width = width; o.height = height; o.fps = fps; o.paced = true; o.frames = frames
    let source = PatternSource(options: o)
    return (source, try source.configure(StreamRequest(pixelFormat: .yuyv, width: width, height: height, fps: fps)))
}

private func ringExists(_ name: String) -> Bool { FileManager.default.fileExists(atPath: "/dev/shm/" + name) }

private func metadataSequence(_ json: String?) -> UInt64? {
    guard let d = json?.data(using: .utf8), let o = try? JSONSerialization.jsonObject(with: d) as? [String: Any] else { return nil }
    return (o["sequence"] as? NSNumber)?.uint64Value
}

/// Reads a whole file descriptor on a thread of its own (the reader side of a pipe).
private final class PipeDrain: @unchecked Sendable {
    // @unchecked Sendable: `data` is written by the thread and read after `join`.
    private(set) var data = [UInt8]()
    private var thread: EngineThread?
    init(fd: Int32, closeAfter limit: Int = .max, delayPerChunkMicroseconds: UInt32 = 0) {
        thread = EngineThread(name: "pipe-drain") { [self] in
            var buf = [UInt8](repeating: 0, count: 1 << 16)
            while data.count < limit {
                let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, min($0.count, limit - data.count)) }
                if n <= 0 { break }
                data += buf[0..<n]
                if delayPerChunkMicroseconds > 0 { usleep(delayPerChunkMicroseconds) }
            }
            close(fd)
        }
    }
    func join() { thread?.join() }
}

@Suite struct SharedMemoryRingTests {
    let format = FrameFormat(.yuyv, width: 96, height: 64)
    let interval = FrameInterval(fps: 30)

    @Test func framesAndMetadataArriveIntactAndInOrder() throws {
        let name = uniqueRingName()
        let writer = try ShmRingWriter(name: name, format: format, interval: interval, slotCount: 4)
        let reader = try ShmRingReader(name: name)
        #expect(reader.format == format && reader.slotCount == 4 && reader.writerPID == getpid())
        let f = Frame(capacity: format.maxByteCount, format: format)
        for i in 0..<10 {
            fillFrame(f, index: i)
            f.metadata.exposureTime = Double(100 + i)
            writer.publish(f)
            guard case .frame(let got) = reader.next(timeoutNanoseconds: 1_000_000_000) else { Issue.record("no frame \(i)"); return }
            #expect(got.index == UInt64(i))
            #expect(got.sequence == UInt64(i))
            #expect(got.timestamp == f.timestamp)
            #expect(got.pixels == expectedPixels(format, sequence: i))
            #expect(got.metadataJSON == f.metadataJSON())
            #expect(got.metadataJSON?.contains("\"exposure_us\":\(Double(100 + i))") == true)
            #expect(got.publishNanoseconds >= got.receiveNanoseconds)
        }
        #expect(reader.missed == 0)
        writer.close()
        #expect(reader.next(timeoutNanoseconds: 100_000_000).isFinished)
        #expect(!ringExists(name))
    }

    @Test func aReaderThatFallsBehindSeesTheGapAndAMidStreamReaderStartsAtTheNewest() throws {
        let name = uniqueRingName()
        let writer = try ShmRingWriter(name: name, format: format, interval: interval, slotCount: 4)
        let f = Frame(capacity: format.maxByteCount, format: format)
        for i in 0..<3 { fillFrame(f, index: i); writer.publish(f) }
        let early = try ShmRingReader(name: name)
        #expect(early.nextIndex == 2)               // mid-stream: the newest complete frame first
        guard case .frame(let first) = early.next(timeoutNanoseconds: 0) else { Issue.record("no frame"); return }
        #expect(first.index == 2 && first.pixels == expectedPixels(format, sequence: 2))
        for i in 3..<13 { fillFrame(f, index: i); writer.publish(f) }   // ten more: the reader is lapped
        guard case .frame(let next) = early.next(timeoutNanoseconds: 0) else { Issue.record("no frame"); return }
        #expect(next.index == 12)                    // skipped to the newest
        #expect(early.missed == 9)                   // frames 3…11
        #expect(next.pixels == expectedPixels(format, sequence: 12))
        let late = try ShmRingReader(name: name)
        #expect(late.nextIndex == 12)
        writer.close()
    }

    @Test func staleRingOfAKilledRunIsReplacedAndALiveOneIsRefused() throws {
        let name = uniqueRingName()
        let first = try ShmRingWriter(name: name, format: format, interval: interval)
        #expect(throws: ShmRingError.inUse(name: name, pid: getpid())) { _ = try ShmRingWriter(name: name, format: format, interval: interval) }
        // Make the ring look like a killed run's: its writer is a process that has exited.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/true")
        try p.run()
        p.waitUntilExit()
        let deadPID = p.processIdentifier
        let fd = shm_open("/" + name, O_RDWR, 0)
        #expect(fd >= 0)
        let m = try ShmMapping.map(fd: fd, size: ShmRingLayout.headerSize, writable: true, name: name)
        m.set(ShmRingLayout.Header.writerPID, UInt32(bitPattern: deadPID))
        m.unmap(); close(fd)
        let second = try ShmRingWriter(name: name, format: format, interval: interval)
        #expect(second.replacedStaleWriter == deadPID)
        let reader = try ShmRingReader(name: name)
        #expect(reader.writerPID == getpid())
        second.close()
        #expect(!ringExists(name))
        first.close(unlink: false)   // the old mapping; its name was already taken over and removed
    }

    @Test func aFileThatIsNotARingIsLeftAlone() throws {
        let name = uniqueRingName()
        try Data(repeating: 7, count: 8192).write(to: URL(fileURLWithPath: "/dev/shm/" + name))
        defer { try? FileManager.default.removeItem(atPath: "/dev/shm/" + name) }
        #expect(throws: ShmRingError.notARing(name: name)) { _ = try ShmRingWriter(name: name, format: format, interval: interval) }
        #expect(throws: ShmRingError.self) { _ = try ShmRingWriter(name: "a/b", format: format, interval: interval) }
        #expect(throws: ShmRingError.notFound(name: name + "x")) { _ = try ShmRingReader(name: name + "x") }
    }

    @Test func engineRunPublishesEveryFrameToAReaderAndRemovesTheRing() throws {
        let name = uniqueRingName()
        // A live (paced) source, so the writer is never ahead of the reader by a ring's worth.
        let (source, cfg) = try pacedPattern(width: 160, height: 120, fps: 100, frames: 100)
        let output = SharedMemoryOutput(name: name, slots: 16)
        let recorder = ChecksumRecorder()
        let engine = CaptureEngine(source: source, configuration: cfg, stages: [], consumers: [output, recorder])
        let received = LockedBox<[(UInt64, UInt64, UInt64?, UInt64)]>([])
        let readerMissed = Atomic<UInt64>(0)
        let attached = Atomic<Bool>(false)
        let readerThread = EngineThread(name: "shm-reader") {
            var reader: ShmRingReader?
            while reader == nil { reader = try? ShmRingReader(name: name); if reader == nil { usleep(1000) } }
            attached.store(true, ordering: .releasing)
            while case .frame(let f) = reader!.next(timeoutNanoseconds: 2_000_000_000) {
                received.withLock { $0.append((f.sequence, checksum(f.pixels), metadataSequence(f.metadataJSON), f.index)) }
            }
            readerMissed.store(reader!.missed, ordering: .relaxed)
        }
        try engine.start()
        engine.waitUntilFinished()
        readerThread.join()
        let didAttach = attached.load(ordering: .acquiring)
        #expect(didAttach)
        #expect(!ringExists(name))
        let got = received.withLock { $0 }
        let sums = recorder.sums.withLock { $0 }
        // A live source on a loaded machine may drop (counted) before or at the output; what
        // arrives is intact, in order, and every ring frame after the first is there unless the
        // reader says it missed it.
        #expect(got.count >= 10)                     // most of 100 on a calm machine; the whole suite in parallel on 2 cores starves it
        #expect(zip(got, got.dropFirst()).allSatisfy { $1.0 > $0.0 })
        let indexGaps = zip(got, got.dropFirst()).reduce(UInt64(0)) { $0 + ($1.1.3 - $1.0.3 - 1) }
        #expect(indexGaps == readerMissed.load(ordering: .relaxed))
        var checked = 0
        for (seq, sum, metaSeq, _) in got {
            #expect(metaSeq == seq)
            if let expected = sums[seq] { #expect(expected == sum); checked += 1 }
        }
        #expect(checked >= got.count * 9 / 10)
        let s = engine.statistics
        #expect(output.framesPublished + s.consumers[0].drops.total == s.delivered)
        #expect(s.captured == s.delivered + s.drops.total)
    }

    @Test func aSlowOrVanishedReaderNeverSlowsALiveSource() throws {
        let name = uniqueRingName()
        let (source, cfg) = try pacedPattern(width: 320, height: 240, fps: 250, frames: 250)
        let output = SharedMemoryOutput(name: name, slots: 4)
        let engine = CaptureEngine(source: source, configuration: cfg, stages: [], consumers: [output])
        let missed = Atomic<UInt64>(0)
        let slowReader = EngineThread(name: "slow-reader") {
            var reader: ShmRingReader?
            while reader == nil { reader = try? ShmRingReader(name: name); if reader == nil { usleep(500) } }
            // Reads five frames slowly, then vanishes without a word.
            for _ in 0..<5 { _ = reader!.next(timeoutNanoseconds: 1_000_000_000); usleep(60_000) }
            _ = reader!.next(timeoutNanoseconds: 1_000_000_000)
            missed.store(reader!.missed, ordering: .relaxed)
        }
        let t0 = monotonicNanoseconds()
        try engine.start()
        engine.waitUntilFinished()
        let seconds = Double(monotonicNanoseconds() - t0) / 1e9
        slowReader.join()
        let s = engine.statistics
        #expect(s.captured == 250)
        #expect(s.captured == s.delivered + s.drops.total)
        #expect(seconds < 2)                        // 1 s of frames; a reader that held the writer would take longer
        let gaps = missed.load(ordering: .relaxed)
        #expect(gaps > 0)                           // the slow reader saw gaps
        #expect(output.framesPublished + s.consumers[0].drops.total == s.delivered)
    }
}

extension ShmRingReader.Result {
    var isFinished: Bool { if case .finished = self { return true } else { return false } }
}

private func checksum(_ bytes: [UInt8]) -> UInt64 {
    bytes.withUnsafeBytes { XXHash64.hash($0) }
}

/// Records a checksum of every frame it sees, by sequence number.
final class ChecksumRecorder: FrameConsumer, Sendable {
    let consumerName = "recorder"
    var ringCapacity: Int { 64 }
    let sums = LockedBox<[UInt64: UInt64]>([:])
    func consume(_ frame: Frame) {
        let sum = XXHash64.hash(UnsafeRawBufferPointer(frame.bytes))
        sums.withLock { $0[frame.sequence] = sum }
    }
}

@Suite struct FramePipeOutputTests {
    let format = FrameFormat(.i420, width: 64, height: 48)

    private func pipePair() -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        return (fds[0], fds[1])
    }

    /// Runs `count` synthetic frames of `fmt` through a pipe output (plus `others`); returns the
    /// output and every byte the reader got.
    private func runThroughPipe(_ fmt: FrameFormat, count: Int, as format: FramePipeOutput.Format, others: [any FrameConsumer] = []) throws -> (FramePipeOutput, [UInt8]) {
        let (r, w) = pipePair()
        let drain = PipeDrain(fd: r)
        let source = SyntheticSource(format: fmt, count: count)
        let output = FramePipeOutput(path: "/dev/fd/\(w)", format: format)
        let engine = CaptureEngine(source: source, configuration: source.configuration, stages: [], consumers: [output] + others)
        try engine.start()
        engine.waitUntilFinished()
        close(w)
        drain.join()
        return (output, drain.data)
    }

    @Test func y4mThroughAPipeArrivesIntactAndInOrderWithItsMetadata() throws {
        let dir = makeTempDirectory()
        let metadata = MetadataWriter(path: dir + "/frames.jsonl")
        let (output, data) = try runThroughPipe(format, count: 40, as: .y4m, others: [metadata])
        #expect(output.framesWritten == 40 && !output.readerClosed && output.error == nil)
        let path = dir + "/out.y4m"
        try Data(data).write(to: URL(fileURLWithPath: path))
        let reader = try Y4MReader(path: path)
        #expect(reader.format.width == 64 && reader.format.pixelFormat == .i420)
        let f = Frame(capacity: reader.format.maxByteCount, format: reader.format)
        var n = 0
        while try reader.read(into: f) {
            #expect([UInt8](UnsafeRawBufferPointer(f.bytes)) == expectedPixels(format, sequence: n))
            n += 1
        }
        #expect(n == 40)
        let lines = try String(contentsOfFile: dir + "/frames.jsonl", encoding: .utf8).split(separator: "\n")
        #expect(lines.map { metadataSequence(String($0)) } == (0..<40).map { UInt64($0) })
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test(arguments: [FrameFormat(.yuyv, width: 40, height: 30), FrameFormat(.uyvy, width: 40, height: 30),
                      FrameFormat(.nv12, width: 40, height: 30), FrameFormat(.yuyv, width: 40, height: 30, bytesPerRow: 96),
                      FrameFormat(.uyvy, width: 42, height: 30), FrameFormat(.i420, width: 40, height: 30)])
    func y4mOfEveryFormatIsWhatY4MWriterWrites(_ fmt: FrameFormat) throws {
        let dir = makeTempDirectory()
        let (_, data) = try runThroughPipe(fmt, count: 5, as: .y4m)
        let reference = try Y4MWriter(path: dir + "/ref.y4m", format: fmt, interval: SyntheticSource(format: fmt, count: 0).configuration.interval)
        let f = Frame(capacity: fmt.maxByteCount, format: fmt)
        for i in 0..<5 { fillFrame(f, index: i); try reference.write(f) }
        reference.close()
        #expect(data == [UInt8](try Data(contentsOf: URL(fileURLWithPath: dir + "/ref.y4m"))))
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// A y4m of a stream whose every frame was dropped is an empty stream with its header, also
    /// where the decoded layout waits for the first frame (2 Dec: an MJPEG run with a deadline
    /// stage that let nothing through left a 0-byte file ffprobe refused).
    @Test func aStreamWithNoFrameStillHasItsHeader() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for (pf, chroma) in [(PixelFormat.mjpeg, "C422"), (.rgb24, "C420"), (.yuyv, "C422")] {
            let path = dir + "/empty-\(pf).y4m"
            let out = FramePipeOutput(path: path)
            try out.start(configuration: StreamConfiguration(format: FrameFormat(pf, width: 64, height: 32), interval: FrameInterval(fps: 30), bufferCount: 4))
            out.finish(error: nil)
            let text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self)
            #expect(text.hasPrefix("YUV4MPEG2 W64 H32"), "\(pf): \(text)")
            #expect(text.contains(chroma) && text.hasSuffix("\n") && !text.contains("FRAME"), "\(pf): \(text)")
        }
    }

    @Test func rawFramesAreTheBarePlanes() throws {
        let fmt = FrameFormat(.yuyv, width: 40, height: 30)
        let (output, data) = try runThroughPipe(fmt, count: 12, as: .raw)
        #expect(output.framesWritten == 12)
        let size = FramePipeOutput.rawFrameBytes(fmt)
        #expect(size == 40 * 2 * 30)
        #expect(FramePipeOutput.rawLayout(of: fmt).contains("30 rows of 80 bytes"))
        #expect(data.count == 12 * size)
        for i in 0..<12 { #expect(Array(data[i * size..<(i + 1) * size]) == expectedPixels(fmt, sequence: i)) }
    }

    /// A reader that keeps the pipe open but stops reading (1 Dec sweep: `run --output - | sleep
    /// 25` outlived SIGTERM until `sleep` ended): once asked, the output stops waiting for it.
    @Test func aReaderThatStopsReadingCannotHoldTheOutputOnceItIsAskedToStop() throws {
        let (r, w) = pipePair()
        defer { close(r) }
        let output = FramePipeOutput(path: "/dev/fd/\(w)", format: .raw)
        let fmt = FrameFormat(.yuyv, width: 640, height: 480)
        try output.start(configuration: StreamConfiguration(format: fmt, interval: FrameInterval(fps: 30), bufferCount: 4))
        close(w)                                   // the output has its own descriptor
        let frame = Frame(capacity: fmt.maxByteCount, format: fmt)
        fillFrame(frame, index: 0)
        // Nobody reads: the pipe (1 MiB at most) fills within a few frames and a write waits.
        let done = LockedBox(false)
        let writer = EngineThread(name: "pipe-writer") {
            for _ in 0..<20 { output.consume(frame) }
            done.withLock { $0 = true }
        }
        usleep(300_000)
        let finishedEarly = done.withLock { $0 }
        #expect(!finishedEarly, "the writes did not block: the test proves nothing")
        let t0 = monotonicNanoseconds()
        output.stopWaitingForTheReader(after: 0.2)
        writer.join()
        let waited = Double(monotonicNanoseconds() - t0) / 1e9
        #expect(waited < 2, "the output waited \(waited) s for a reader that does not read")
        // Given up on, not closed: the reader still holds the pipe.
        #expect(output.readerStalled && !output.readerClosed && output.error == nil)
        #expect(output.framesWritten >= 1 && output.framesWritten < 20)
        #expect(output.framesWritten + output.framesAfterClose == 20)
        output.finish(error: nil)
    }

    /// A reader that reads, however slowly, is never given up on: the time counts from the last
    /// bytes that went in.
    @Test func aSlowReaderThatReadsIsNotGivenUpOn() throws {
        let (r, w) = pipePair()
        let fmt = FrameFormat(.yuyv, width: 320, height: 240)
        let drain = PipeDrain(fd: r, delayPerChunkMicroseconds: 20_000)   // ~3 MB/s
        let output = FramePipeOutput(path: "/dev/fd/\(w)", format: .raw)
        try output.start(configuration: StreamConfiguration(format: fmt, interval: FrameInterval(fps: 30), bufferCount: 4))
        close(w)
        output.stopWaitingForTheReader(after: 0.3)
        let frame = Frame(capacity: fmt.maxByteCount, format: fmt)
        fillFrame(frame, index: 0)
        for _ in 0..<30 { output.consume(frame) }   // 4.6 MB: the pipe fills again and again
        output.finish(error: nil)
        drain.join()
        #expect(output.framesWritten == 30 && !output.readerClosed)
        #expect(drain.data.count == 30 * fmt.maxByteCount)
    }

    /// A fifo with no reader is an error at once (StreamFile's rule), not a thread in open() for
    /// ever (1 Dec sweep: `run --output FIFO` with no reader ran for ten minutes, Ctrl-C ignored).
    @Test func aFifoWithNoReaderIsAnErrorAtOnce() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fifo = dir + "/frames.fifo"
        #expect(mkfifo(fifo, 0o644) == 0)
        let output = FramePipeOutput(path: fifo, format: .y4m)
        #expect(throws: StreamFileError.cannotOpen(path: fifo, errno: ENXIO, message: "a fifo with no reader (start the reader first)")) {
            try output.start(configuration: StreamConfiguration(format: format, interval: FrameInterval(fps: 30), bufferCount: 4))
        }
        output.finish(error: nil)
    }

    @Test func aReaderThatClosesThePipeEndsTheRunWithBalancedBooks() throws {
        let (r, w) = pipePair()
        let frameBytes = format.maxByteCount + 6
        // The reader takes the stream header and three frames, then closes its end.
        let drain = PipeDrain(fd: r, closeAfter: 60 + 3 * frameBytes)
        let source = SyntheticSource(format: format, count: 100_000)
        let output = FramePipeOutput(path: "/dev/fd/\(w)", format: .y4m)
        let engine = CaptureEngine(source: source, configuration: source.configuration, stages: [], consumers: [output])
        output.onClosed = { engine.stop() }
        try engine.start()
        #expect(engine.waitUntilFinished(timeoutSeconds: 20))
        drain.join()
        close(w)
        let s = engine.statistics
        #expect(output.readerClosed && output.error == nil)
        #expect(s.captured < 100_000)
        #expect(s.captured == s.delivered + s.drops.total)
        #expect(output.framesWritten + output.framesAfterClose + s.consumers[0].drops.total == s.delivered)
        #expect(output.framesWritten >= 3)
    }

    @Test func aSlowPipeReaderNeverSlowsALiveSourceAndItsDropsAreCounted() throws {
        let (r, w) = pipePair()
        let (source, cfg) = try pacedPattern(width: 320, height: 240, fps: 200, frames: 200)
        // The reader takes a 64 KiB chunk every 20 ms: about 3 MB/s against 30 MB/s of frames.
        let drain = PipeDrain(fd: r, delayPerChunkMicroseconds: 20_000)
        let output = FramePipeOutput(path: "/dev/fd/\(w)", format: .raw)
        let engine = CaptureEngine(source: source, configuration: cfg, stages: [], consumers: [output])
        let t0 = monotonicNanoseconds()
        try engine.start()
        engine.waitUntilFinished()
        let seconds = Double(monotonicNanoseconds() - t0) / 1e9
        close(w)
        drain.join()
        let s = engine.statistics
        #expect(s.captured == 200)
        #expect(s.drops[.outOfBuffers] == 0)       // the reader never held the source's buffers
        #expect(seconds < 3)                      // the writer's wait for its last frame is bounded by the reader, not the source
        let late = s.consumers[0].drops.total
        #expect(late > 0)                           // consumer_late
        #expect(output.framesWritten + late == s.delivered)
        #expect(drain.data.count == Int(output.framesWritten) * FramePipeOutput.rawFrameBytes(cfg.format))
    }
}
