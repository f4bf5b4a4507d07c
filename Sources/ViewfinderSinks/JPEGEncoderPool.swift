import Viewfinder

/// Encodes frames to JPEG on a few worker threads (one TurboJPEG handle each) and gives the results
/// back in submission order.
///
/// One thread (the movie output's) submits and collects; workers take the oldest pending job.
/// The window of jobs in flight is bounded (`slots`), each slot owning a preallocated output
/// buffer, so memory is fixed and a slow encoder applies back-pressure instead of queueing without
/// bound. Frames are retained while they wait and released once encoded.
final class JPEGEncoderPool: @unchecked Sendable {
    // @unchecked Sendable: every slot field is read and written with `lock` held, except a slot's
    // output buffer, which only the worker that marked the slot `.encoding` writes and only the
    // collecting thread reads after the slot became `.done` (both transitions under `lock`).
    enum State { case free, pending, encoding, done }
    final class Slot {
        var state: State = .free
        var frame: Frame?
        var ticket: UInt64 = 0
        var timestamp: UInt64 = 0
        var sequence: UInt64 = 0
        var output: UnsafeMutableRawPointer
        var outputCapacity: Int
        var outputCount = 0
        var error: (any Error)?
        init(capacity: Int) { outputCapacity = capacity; output = .allocate(byteCount: max(capacity, 64), alignment: 64) }
        deinit { output.deallocate() }
        func ensure(_ n: Int) {
            if n > outputCapacity { output.deallocate(); output = .allocate(byteCount: n, alignment: 64); outputCapacity = n }
        }
    }

    struct Result {
        let bytes: UnsafeRawBufferPointer
        let timestamp: UInt64
        let sequence: UInt64
        let error: (any Error)?
    }

    let quality: Int
    let subsampling: ChromaSubsampling?
    private let slots: [Slot]
    private let lock = ConditionLock()
    private var nextTicket: UInt64 = 0
    private var nextOut: UInt64 = 0
    private var stopping = false
    private var threads: [EngineThread] = []
    /// Index of the slot handed out by the last ``next(wait:)``, freed at the following call.
    private var lent: Int?

    init(threads n: Int, quality: Int, subsampling: ChromaSubsampling?, expectedBytes: Int) {
        self.quality = quality
        self.subsampling = subsampling
        let count = max(2, 2 * n + 1)
        slots = (0..<count).map { _ in Slot(capacity: expectedBytes) }
        for i in 0..<max(1, n) {
            threads.append(EngineThread(name: "vf-jpeg-\(i)") { [self] in self.work() })
        }
    }

    deinit {
        shutdown()
        for s in slots { s.frame?.release() }
    }

    /// Jobs submitted and not yet collected.
    var inFlight: Int { lock.withLock { Int(nextTicket &- nextOut) } }
    var capacity: Int { slots.count }

    /// Stops the workers (pending jobs are abandoned and their frames released).
    func shutdown() {
        lock.withLock { stopping = true; lock.broadcast() }
        for t in threads { t.join() }
        threads = []
    }

    /// Queues `frame` for encoding (retaining it). `passthrough` copies the bytes as they are (MJPEG).
    /// Blocks while every slot is in use (the caller must collect with ``next(wait:)``).
    func submit(_ frame: Frame, passthrough: Bool) {
        lock.lock()
        releaseLent()
        let idx = Int(nextTicket % UInt64(slots.count))
        let s = slots[idx]
        while s.state != .free { lock.wait() }
        s.ticket = nextTicket
        s.timestamp = frame.timestamp.nanoseconds
        s.sequence = frame.sequence
        s.error = nil
        nextTicket &+= 1
        if passthrough {
            s.ensure(frame.bytesUsed)
            s.output.copyMemory(from: frame.data, byteCount: frame.bytesUsed)
            s.outputCount = frame.bytesUsed
            s.state = .done
        } else {
            frame.retain()
            s.frame = frame
            s.state = .pending
        }
        lock.broadcast()
        lock.unlock()
    }

    /// The next result in submission order: waits for it when `wait`, else nil if it is not ready.
    /// The bytes stay valid until the next call to `submit` or `next`.
    func next(wait: Bool) -> Result? {
        lock.lock()
        defer { lock.unlock() }
        releaseLent()
        guard nextOut < nextTicket else { return nil }
        let idx = Int(nextOut % UInt64(slots.count))
        let s = slots[idx]
        while s.state != .done {
            if !wait { return nil }
            lock.wait()
        }
        nextOut &+= 1
        lent = idx
        return Result(bytes: UnsafeRawBufferPointer(start: s.output, count: s.outputCount), timestamp: s.timestamp, sequence: s.sequence, error: s.error)
    }

    private func releaseLent() {
        if let l = lent { slots[l].state = .free; lent = nil; lock.broadcast() }
    }

    private func work() {
        let encoder: JPEGEncoder?
        var failure: (any Error)?
        do { encoder = try JPEGEncoder() } catch { encoder = nil; failure = error }
        // The encoded bytes live in the encoder: it must outlive every copy out of it. A worker
        // without an encoder (TurboJPEG could not make its handle) still takes jobs and finishes
        // each with that error, a counted drop: a worker that just returned would leave its jobs
        // pending and the movie's thread waiting for them for ever.
        withExtendedLifetime(encoder) { work(encoder, failure: failure) }
    }

    private func work(_ encoder: JPEGEncoder?, failure: (any Error)?) {
        lock.lock()
        while true {
            if stopping { break }
            // The oldest pending job.
            var pick: Slot?
            for s in slots where s.state == .pending { if pick == nil || s.ticket < pick!.ticket { pick = s } }
            guard let s = pick else { lock.wait(); continue }
            s.state = .encoding
            let frame = s.frame!
            s.frame = nil
            lock.unlock()
            var err: (any Error)?
            var count = 0
            do {
                guard let encoder else { throw failure ?? JPEGEncoderPoolError.noEncoder }
                let jpeg = try encoder.encode(frame, quality: quality, subsampling: subsampling)
                s.ensure(jpeg.count)
                s.output.copyMemory(from: jpeg.baseAddress!, byteCount: jpeg.count)
                count = jpeg.count
            } catch { err = error }
            frame.release()
            lock.lock()
            s.outputCount = count
            s.error = err
            s.state = .done
            lock.broadcast()
        }
        lock.unlock()
    }
}

/// Why a frame of the pool was not encoded when no other error says it.
enum JPEGEncoderPoolError: Error, CustomStringConvertible {
    case noEncoder
    var description: String { "the encoder thread has no TurboJPEG handle" }
}
