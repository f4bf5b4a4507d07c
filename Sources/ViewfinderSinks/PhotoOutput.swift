import Foundation
import Logging
import Viewfinder

/// Receives a capture's progress and results (AVCapturePhotoCaptureDelegate). For every call of
/// ``PhotoOutput/capture(settings:delegate:)`` the four progress calls come exactly once each, in
/// order — willBegin, willCapture, didCapture, didFinishCapture — even when the capture fails;
/// didFinishProcessing comes once per image (``ResolvedPhotoSettings/expectedPhotoCount``) between
/// didCapture and didFinishCapture, with the photo or the error.
///
/// Calls come on the photo output's thread, or on the caller's thread for a capture refused at once.
public protocol PhotoCaptureDelegate: AnyObject, Sendable {
    func photoOutput(_ output: PhotoOutput, willBeginCaptureFor resolved: ResolvedPhotoSettings)
    func photoOutput(_ output: PhotoOutput, willCapturePhotoFor resolved: ResolvedPhotoSettings)
    func photoOutput(_ output: PhotoOutput, didCapturePhotoFor resolved: ResolvedPhotoSettings)
    func photoOutput(_ output: PhotoOutput, didFinishProcessingPhoto photo: CapturePhoto?, resolved: ResolvedPhotoSettings, error: PhotoCaptureError?)
    func photoOutput(_ output: PhotoOutput, didFinishCaptureFor resolved: ResolvedPhotoSettings, error: PhotoCaptureError?)
}

extension PhotoCaptureDelegate {
    public func photoOutput(_ output: PhotoOutput, willBeginCaptureFor resolved: ResolvedPhotoSettings) {}
    public func photoOutput(_ output: PhotoOutput, willCapturePhotoFor resolved: ResolvedPhotoSettings) {}
    public func photoOutput(_ output: PhotoOutput, didCapturePhotoFor resolved: ResolvedPhotoSettings) {}
    public func photoOutput(_ output: PhotoOutput, didFinishProcessingPhoto photo: CapturePhoto?, resolved: ResolvedPhotoSettings, error: PhotoCaptureError?) {}
    public func photoOutput(_ output: PhotoOutput, didFinishCaptureFor resolved: ResolvedPhotoSettings, error: PhotoCaptureError?) {}
}

/// The still-photo output, modelled on AVCapturePhotoOutput: JPEG (TurboJPEG, or MJPEG passed
/// through), raw stills, raw companions, exposure brackets and bursts.
///
/// A `FrameConsumer` on its own thread that keeps only the newest frame of a live camera
/// (`discardsLateFrames`); it does nothing per frame while no capture is pending. A non-live source
/// (a replay, an unpaced pattern) waits for its outputs, so nothing is late there: every frame
/// reaches the output in turn, and a burst takes consecutive frames (it lost frames to "late"
/// while it encoded). ``replayHoldFrame`` lets a capture asked for after `startRunning()` take a
/// chosen frame of such a source instead of whichever the replay had reached.
public final class PhotoOutput: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: the request queue, the used ids, the configuration and the running flag
    // are guarded by `lock`; jobs in progress and the encoder are confined to the consumer thread.
    public let consumerName: String
    public var ringCapacity: Int { 4 }
    /// A Bayer mosaic is encoded from the engine's full-size decoded view (the encoder takes YUV
    /// and packed RGB as they are, and a camera's JPEGs pass through).
    public func needsPixels(for format: PixelFormat) -> Bool { format.isBayer }
    /// On a live camera only (the engine tells a live source's consumers through `willConsume`
    /// before each frame): a replay waits for this output instead. Read on the consumer thread.
    public var discardsLateFrames: Bool { sawLiveSource }
    public func willConsume(framesWaiting: Int) { sawLiveSource = true }

    /// On a non-live source (a replay, an unpaced pattern): the output's frame count (from 0 at
    /// each start) at which, with no capture queued, it waits — at most ``replayHoldSeconds`` —
    /// for one to be asked for, and before which a queued capture waits for that frame. A command
    /// that lets `n` frames pass and then takes a still (`viewfinder snap --warmup n` on a replay)
    /// gets frame `n`, not whichever frame the replay, running ahead at full speed, had reached —
    /// or none when a short replay ended first. Nil (the default): captures take the next frame,
    /// and nothing waits. A live camera never waits. Set it before the session starts.
    public var replayHoldFrame: Int? {
        get { lock.withLock { replayHoldValue } }
        set { lock.withLock { replayHoldValue = newValue } }
    }
    /// The longest the output holds a replay at ``replayHoldFrame`` for a capture to be asked for.
    public var replayHoldSeconds: Double = 10
    /// What drives exposure for brackets (``DeviceExposureBracketer`` over the device's controls,
    /// or a hook served by the exposure stage). Set before capturing a bracket.
    public var bracketer: (any ExposureBracketing)? {
        get { lock.withLock { bracketerValue } }
        set { lock.withLock { bracketerValue = newValue } }
    }
    /// What fires the flash for photo settings with a ``PhotoSettings/flashMode`` (``DeviceFlash``,
    /// attached when the session's input is a device with a flash).
    public var flash: (any PhotoFlashing)? {
        get { lock.withLock { flashValue } }
        set { lock.withLock { flashValue = newValue } }
    }
    /// The flash modes ``PhotoSettings/flashMode`` may take (AVFoundation's `supportedFlashModes`):
    /// `[.off]` without a flash.
    public var supportedFlashModes: [FlashMode] { flash?.supportedFlashModes ?? [.off] }
    /// Whether a photo with flash `.auto` would fire now (AVFoundation's `isFlashScene`).
    public var isFlashScene: Bool { flash?.shouldFire(.auto) ?? false }

    /// The longest a bracket waits for a frame taken with the new exposure, beyond the control latency.
    public var bracketSettleLimitFrames = 6
    /// Frames this output passed over while taking a photo, by reason: a camera JPEG that does not
    /// decode (truncated, no end marker, damaged) is `DropReason.corrupt`, and the photo is taken
    /// from the next frame instead. Raw stills keep the buffer as it came and skip nothing.
    public let droppedFrames = DropCounters()

    private let logger: Logger
    private let lock = ConditionLock()
    let connectionBox = LockedBox(WeakConnection(nil))
    private var bracketerValue: (any ExposureBracketing)?
    private var flashValue: (any PhotoFlashing)?
    private var queue: [Job] = []
    private var usedIDs = Set<Int64>()
    private var configuration: StreamConfiguration?
    private var running = false
    private var ended = false
    private var replayHoldValue: Int?

    // Consumer thread only.
    private var current: Job?
    private var sawLiveSource = false
    /// Frames handed to this output since it started.
    private var framesSeen = 0
    private var encoder: JPEGEncoder?
    /// Checks camera JPEGs before they are passed through (consumer thread; made in `start`).
    private var checker: JPEGDecoder?
    private let downscaler = PhotoDownscaler()

    private final class Job {
        let settings: PhotoSettings
        let delegate: any PhotoCaptureDelegate
        /// Resolved at capture time, or at the first frame when the stream format was not known yet.
        var resolved: ResolvedPhotoSettings
        var resolvedFinal: Bool
        var began = false, willCaptureSent = false, didCaptureSent = false, finished = false
        var delivered = 0
        var bracketActive = false
        var applied: (exposureTime: Double, gain: Double)?
        var waited = 0
        /// The flash was strobed and not yet ended; frames seen since.
        var flashLit = false
        var flashWaited = 0
        var shots: [Shot] = []
        init(settings: PhotoSettings, delegate: any PhotoCaptureDelegate, resolved: ResolvedPhotoSettings, final: Bool = true) {
            self.settings = settings; self.delegate = delegate; self.resolved = resolved; self.resolvedFinal = final
        }
    }
    private struct Shot {
        var bytes: [UInt8]; var format: FrameFormat; var sequence: UInt64; var timestamp: Timestamp
        var metadata: FrameMetadata; var pixelsModified: Bool; var bias: Double?; var date: Date
        /// The pixels to encode when they are not the frame's own bytes: the full-size decoded view
        /// of an MJPEG/RGB/Bayer frame a stage changed (or of a Bayer frame). Raw stills keep `bytes`.
        var decoded: (bytes: [UInt8], format: FrameFormat)? = nil
    }

    public init(name: String = "photo", logger: Logger = Logger(label: "viewfinder.photo")) {
        consumerName = name
        self.logger = logger
    }

    /// Captures `settings` (used once). Never throws: every outcome reaches the delegate.
    public func capture(settings: PhotoSettings, delegate: any PhotoCaptureDelegate) {
        lock.lock()
        let reused = !usedIDs.insert(settings.uniqueID).inserted
        let cfg = configuration
        // Running, or connected to a session that is starting (the first frame will come).
        let isRunning = !ended && (running || connectionBox.withLock { $0.connection != nil })
        let haveBracketer = bracketerValue != nil
        var resolved = resolve(settings, cfg)
        var refusal: PhotoCaptureError?
        if reused { refusal = .settingsReused(uniqueID: settings.uniqueID) }
        else if let r = validate(settings) { refusal = .invalidSettings(r) }
        else if settings.flashMode != .off && !(flashValue?.supportedFlashModes ?? [.off]).contains(settings.flashMode) {
            refusal = .flashUnavailable("flash mode \(settings.flashMode.rawValue) is not among the supported \((flashValue?.supportedFlashModes ?? [.off]).map(\.rawValue))")
        }
        else if !settings.exposureBiases.isEmpty && !haveBracketer { refusal = .bracketingUnavailable("no exposure control is attached to the photo output") }
        else if !isRunning { refusal = .notRunning }
        if refusal == nil {
            queue.append(Job(settings: settings, delegate: delegate, resolved: resolved, final: cfg != nil))
            lock.broadcast()   // a replay held at `replayHoldFrame` goes on
            lock.unlock()
            return
        }
        lock.unlock()
        if reused { resolved.uniqueID = settings.uniqueID }
        let job = Job(settings: settings, delegate: delegate, resolved: resolved)
        fail(job, refusal!)
    }

    /// Captures and waits for the result (for command-line tools): the delivered photos, or the
    /// capture's error.
    public func capturePhotos(settings: PhotoSettings, timeoutSeconds: Double = 10) throws -> [CapturePhoto] {
        let collector = Collector()
        capture(settings: settings, delegate: collector)
        if !collector.wait(timeoutSeconds: timeoutSeconds) {
            // No frames came: withdraw the capture (the delegate still hears the end of it).
            cancel(uniqueID: settings.uniqueID)
            _ = collector.wait(timeoutSeconds: 5)
            throw PhotoCaptureError.timedOut
        }
        return try collector.result()
    }

    /// Withdraws a capture that has not completed: it ends with ``PhotoCaptureError/cancelled``
    /// (at once if it is still queued, at the next frame if it is in progress). The shots a burst
    /// or bracket in progress has taken are delivered; the rest end with the error.
    public func cancel(uniqueID: Int64) {
        let queued = lock.withLock { () -> Job? in
            if let i = queue.firstIndex(where: { $0.settings.uniqueID == uniqueID }) { return queue.remove(at: i) }
            cancelled.insert(uniqueID)
            return nil
        }
        if let queued { fail(queued, .cancelled) }
    }

    private var cancelled = Set<Int64>()

    private func validate(_ s: PhotoSettings) -> String? {
        if case .jpeg(let q, _) = s.codec, !(1...100).contains(q) { return "JPEG quality \(q) is outside 1...100" }
        if s.codec == .raw && s.rawCompanion { return "a raw capture cannot have a raw companion" }
        if s.burstCount < 1 || s.burstCount > 64 { return "burst count \(s.burstCount) is outside 1...64" }
        if !s.exposureBiases.isEmpty && s.burstCount > 1 { return "a capture is either a bracket or a burst" }
        if !s.exposureBiases.isEmpty && s.flashMode != .off { return "an exposure bracket cannot use the flash" }
        if s.exposureBiases.count > 16 { return "at most 16 bracket biases" }
        if let b = s.exposureBiases.first(where: { !$0.isFinite || abs($0) > 8 }) { return "bias \(b) EV is outside -8...8" }
        if let t = s.embeddedThumbnailSize {
            if !s.embedsExif { return "an embedded thumbnail needs the EXIF segment (embedsExif)" }
            if !(1...512).contains(t.width) || !(1...512).contains(t.height) { return "thumbnail size \(t.width)x\(t.height) is outside 1...512" }
        }
        if let p = s.previewFormat {
            if !FrameConverter.outputPixelFormats.contains(p.pixelFormat) { return "preview format \(p.pixelFormat) is not one of \(FrameConverter.outputPixelFormats.map(\.rawValue).joined(separator: ", "))" }
            if !(1...4096).contains(p.maximumSize.width) || !(1...4096).contains(p.maximumSize.height) { return "preview size \(p.maximumSize.width)x\(p.maximumSize.height) is outside 1...4096" }
        }
        return nil
    }

    private func resolve(_ s: PhotoSettings, _ cfg: StreamConfiguration?) -> ResolvedPhotoSettings {
        let f = cfg?.format
        let src = f?.pixelFormat ?? .yuyv
        var codec = "raw", quality: Int?, sub: ChromaSubsampling?
        if case .jpeg(let q, let requested) = s.codec {
            if src == .mjpeg { codec = "mjpeg-passthrough" }
            else { codec = "jpeg"; quality = q; sub = JPEGEncoder.resolvedSubsampling(for: src, requested: requested) }
        }
        let n = s.shotCount
        return ResolvedPhotoSettings(uniqueID: s.uniqueID, width: f?.width ?? 0, height: f?.height ?? 0, sourceFormat: src, codec: codec, quality: quality,
                                     subsampling: sub, exposureBiases: s.exposureBiases, shotCount: n, rawCompanion: s.rawCompanion,
                                     expectedPhotoCount: n * (s.rawCompanion ? 2 : 1), orientation: s.orientation ?? connectionOrientation)
    }

    // MARK: FrameConsumer

    public func start(configuration cfg: StreamConfiguration) throws {
        encoder = try JPEGEncoder()
        checker = try JPEGDecoder()
        lock.withLock { configuration = cfg; running = true; ended = false }
        sawLiveSource = false
        framesSeen = 0
    }

    public func consume(_ frame: Frame) {
        defer { framesSeen += 1 }
        if current == nil {
            let hold = sawLiveSource ? nil : lock.withLock { replayHoldValue }
            // A replay before its hold frame: the frames pass, a queued capture waits for it.
            if let hold, framesSeen < hold { return }
            current = lock.withLock { () -> Job? in
                if let hold, framesSeen == hold, queue.isEmpty {
                    // Held: the replay waits here for the capture its command is about to ask for.
                    let deadline = monotonicNanoseconds() + UInt64(max(0, replayHoldSeconds) * 1e9)
                    while queue.isEmpty && monotonicNanoseconds() < deadline {
                        _ = lock.wait(untilMonotonicNanoseconds: deadline)
                    }
                }
                return queue.isEmpty ? nil : queue.removeFirst()
            }
        }
        guard let job = current else { return }
        if lock.withLock({ cancelled.remove(job.settings.uniqueID) != nil }) {
            fail(job, .cancelled)
            current = nil
            return
        }
        step(job, frame)
        if job.finished { current = nil }
    }

    public func finish(error: (any Error)?) {
        let pending = lock.withLock { () -> [Job] in
            running = false; ended = true
            defer { queue.removeAll() }
            return queue
        }
        if let j = current { fail(j, .sessionEnded); current = nil }
        for j in pending { fail(j, .sessionEnded) }
    }

    // MARK: Capture steps (consumer thread)

    private func step(_ job: Job, _ frame: Frame) {
        if !job.began {
            if !job.resolvedFinal {
                let cfg = lock.withLock { configuration }
                job.resolved = resolve(job.settings, cfg)
                job.resolvedFinal = true
            }
            job.began = true
            job.resolved.isFlashEnabled = job.settings.flashMode != .off && (flash?.shouldFire(job.settings.flashMode) ?? false)
            job.delegate.photoOutput(self, willBeginCaptureFor: job.resolved)
            if job.resolved.isFlashEnabled {
                guard let f = flash else { fail(job, .flashUnavailable("no flash is attached to the photo output")); return }
                do { try f.fire(); job.flashLit = true; job.flashWaited = 0 } catch {
                    fail(job, (error as? PhotoCaptureError) ?? .flashUnavailable("\(error)")); return
                }
                return // this frame was exposed before the strobe
            }
            if !job.settings.exposureBiases.isEmpty {
                guard let b = bracketer else { fail(job, .bracketingUnavailable("no exposure control")); return }
                do { try b.beginBracket(); job.bracketActive = true } catch {
                    fail(job, .bracketingUnavailable("\(error)")); return
                }
            }
        }
        if job.flashLit && job.shots.isEmpty {
            // Wait for the first frame the strobe lit (the device's control latency).
            job.flashWaited += 1
            if job.flashWaited <= (flash?.latencyFrames ?? 1) { return }
        }
        let k = job.shots.count
        var bias: Double?
        if !job.settings.exposureBiases.isEmpty, let b = bracketer {
            bias = job.settings.exposureBiases[k]
            if job.applied == nil {
                do { job.applied = try b.apply(bias: bias!) } catch { fail(job, .bracketingUnavailable("\(error)")); return }
                job.waited = 0
                return  // this frame was exposed before the change
            }
            job.waited += 1
            let target = job.applied!
            let latency = b.latencyFrames
            var ready: Bool
            if let e = frame.metadata.exposureTime {
                let g = frame.metadata.gain ?? target.gain
                ready = abs(log2(max(e * g, 1e-9) / max(target.exposureTime * target.gain, 1e-9))) < 0.05
            } else {
                ready = job.waited > latency
            }
            if !ready && job.waited > latency + bracketSettleLimitFrames {
                logger.warning("photo \(job.settings.uniqueID): bracket \(bias!) EV: no frame with the new exposure after \(job.waited) frames; taking the next one")
                ready = true
            }
            if !ready { return }
        }
        if !job.willCaptureSent {
            job.willCaptureSent = true
            job.delegate.photoOutput(self, willCapturePhotoFor: job.resolved)
        }
        // A camera JPEG no stage changed is stored as it came, as the movie stores it, even when
        // a full-size decoded view rides along (`--output`, a stage that reads every pixel): it
        // was encoded again from that view, so a still and a movie of one frame differed.
        let unchangedJPEG = frame.format.pixelFormat == .mjpeg && !frame.pixelsModified
        let source = unchangedJPEG ? frame : JPEGEncoder.pixelSource(frame)
        if source === frame, frame.format.pixelFormat == .mjpeg, job.settings.codec != .raw,
           let checker, !checker.decodesCompletely(UnsafeRawBufferPointer(frame.bytes)) {
            // A damaged camera JPEG would be stored as a broken still: count it, take the next frame.
            droppedFrames.count(.corrupt, from: frame.sequence)
            logger.debug("photo \(job.settings.uniqueID): frame \(frame.sequence) is a corrupt JPEG; taking the next one")
            return
        }
        job.shots.append(Shot(bytes: Array(frame.bytes), format: frame.format, sequence: frame.sequence, timestamp: frame.timestamp,
                              metadata: frame.metadata, pixelsModified: frame.pixelsModified, bias: bias, date: PhotoOutput.wallClock(of: frame.timestamp),
                              decoded: source === frame ? nil : (Array(source.bytes), source.format)))
        job.applied = nil
        guard job.shots.count == job.settings.shotCount else { return }

        if job.bracketActive { bracketer?.endBracket(); job.bracketActive = false }
        endFlash(job)
        job.didCaptureSent = true
        job.delegate.photoOutput(self, didCapturePhotoFor: job.resolved)
        let firstError = deliverShots(job)
        job.finished = true
        job.delegate.photoOutput(self, didFinishCaptureFor: job.resolved, error: firstError)
    }

    /// Encodes the job's shots and hands each to the delegate; the first error, if any.
    private func deliverShots(_ job: Job) -> PhotoCaptureError? {
        var firstError: PhotoCaptureError?
        for (i, shot) in job.shots.enumerated() {
            do {
                let photo = try process(shot, job: job, index: i, raw: job.settings.codec == .raw)
                job.delivered += 1
                // The photo's own settings: a camera JPEG a stage changed says it was encoded.
                job.delegate.photoOutput(self, didFinishProcessingPhoto: photo, resolved: photo.resolvedSettings, error: nil)
            } catch {
                let e = (error as? PhotoCaptureError) ?? .encodingFailed("\(error)")
                firstError = firstError ?? e
                job.delivered += 1
                job.delegate.photoOutput(self, didFinishProcessingPhoto: nil, resolved: job.resolved, error: e)
            }
            if job.settings.rawCompanion {
                let raw = try? process(shot, job: job, index: i, raw: true)
                job.delivered += 1
                job.delegate.photoOutput(self, didFinishProcessingPhoto: raw, resolved: job.resolved, error: raw == nil ? .encodingFailed("raw companion") : nil)
            }
        }
        return firstError
    }

    private func process(_ shot: Shot, job: Job, index: Int, raw: Bool) throws -> CapturePhoto {
        let data: [UInt8]
        var thumbnail: [UInt8]?, preview: PhotoPreviewImage?
        if raw {
            let info = RawStill(pixelFormat: shot.format.pixelFormat.rawValue, fourcc: fourCCString(shot.format.pixelFormat.fourcc), width: shot.format.width,
                                height: shot.format.height, bytesPerRow: shot.format.bytesPerRow, byteCount: shot.bytes.count, sequence: shot.sequence,
                                timestampNanoseconds: shot.timestamp.nanoseconds, clock: shot.timestamp.clock.rawValue,
                                exposureTime: shot.metadata.exposureTime, gain: shot.metadata.gain)
            let enc = JSONEncoder(); enc.outputFormatting = [.sortedKeys]
            data = RawStill.magic + Array(try enc.encode(info)) + [0x0A] + shot.bytes
        } else {
            guard case .jpeg(let quality, let sub) = job.settings.codec else { throw PhotoCaptureError.invalidSettings("codec") }
            // The pixels the photo shows: what a stage made (or the mosaic's decoded view), else the frame.
            let pixels = shot.decoded ?? (shot.bytes, shot.format)
            if job.settings.embedsExif, let box = job.settings.embeddedThumbnailSize {
                guard let encoder else { throw PhotoCaptureError.notRunning }
                // Grey when the photo is: encoded here as grey, or a camera's grey JPEG passed through.
                var monochrome = sub == .grey
                if shot.decoded == nil && shot.format.pixelFormat == .mjpeg, let checker {
                    let header = try? shot.bytes.withUnsafeBytes { try checker.header($0) }
                    monochrome = header?.subsampling == .grey
                }
                do { thumbnail = try downscaler.thumbnail(bytes: pixels.bytes, format: pixels.format, box: box, monochrome: monochrome, encoder: encoder) } catch {
                    throw PhotoCaptureError.encodingFailed("thumbnail: \(error)")
                }
            }
            let exif: [UInt8]? = job.settings.embedsExif ? ExifInfo(dateTimeOriginal: shot.date, exposureTime: shot.metadata.exposureTime.map { $0 / 1e6 },
                                                                     iso: shot.metadata.gain.map(ExifInfo.iso(fromGain:)), orientation: job.resolved.orientation,
                                                                     thumbnailJPEG: thumbnail).app1Segment() : nil
            do {
                if let d = shot.decoded {
                    // A stage changed the pixels (or the camera sends a mosaic): encode what it made.
                    guard let encoder else { throw PhotoCaptureError.notRunning }
                    let jpeg = try d.bytes.withUnsafeBytes { try encoder.encode($0.baseAddress!, byteCount: $0.count, format: d.format, quality: quality, subsampling: sub) }
                    data = exif == nil ? Array(jpeg) : try JPEGMarkers.makeStandalone(jpeg, exif: exif)
                } else if shot.format.pixelFormat == .mjpeg {
                    // The camera's JPEG as it is (plus EXIF, and the Huffman tables UVC leaves out).
                    data = try shot.bytes.withUnsafeBytes { try JPEGMarkers.makeStandalone($0, exif: exif) }
                } else {
                    guard let encoder else { throw PhotoCaptureError.notRunning }
                    let jpeg = try shot.bytes.withUnsafeBytes { try encoder.encode($0.baseAddress!, byteCount: $0.count, format: shot.format, quality: quality, subsampling: sub) }
                    data = exif == nil ? Array(jpeg) : try JPEGMarkers.makeStandalone(jpeg, exif: exif)
                }
            } catch let e as SinkError {
                throw PhotoCaptureError.encodingFailed(e.description)
            }
            if let pf = job.settings.previewFormat {
                do { preview = try downscaler.preview(bytes: pixels.bytes, format: pixels.format, as: pf) } catch {
                    throw PhotoCaptureError.encodingFailed("preview: \(error)")
                }
            }
        }
        // A camera's JPEG that a stage changed was encoded afresh: the photo says so (it said
        // "mjpeg-passthrough", decided before the shot, for a re-encoded picture).
        var resolved = job.resolved
        if !raw, let d = shot.decoded, resolved.codec == "mjpeg-passthrough", case .jpeg(let q, let requested) = job.settings.codec {
            resolved.codec = "jpeg"
            resolved.quality = q
            resolved.subsampling = JPEGEncoder.resolvedSubsampling(for: d.format.pixelFormat, requested: requested)
        }
        return CapturePhoto(resolvedSettings: resolved, photoCount: index + 1, exposureBias: shot.bias, isRawPhoto: raw, format: shot.format,
                            sequence: shot.sequence, timestamp: shot.timestamp, metadata: shot.metadata, captureDate: shot.date, data: data,
                            previewImage: preview, embeddedThumbnail: thumbnail)
    }

    /// The wall-clock time of a capture timestamp: exact for CLOCK_REALTIME, converted through the
    /// frame's age for CLOCK_MONOTONIC, now otherwise.
    static func wallClock(of t: Timestamp) -> Date {
        switch t.clock {
        case .realtime: return Date(timeIntervalSince1970: t.seconds)
        case .monotonic:
            let now = monotonicNanoseconds()
            guard t.nanoseconds > 0, t.nanoseconds <= now, now - t.nanoseconds < 3_600_000_000_000 else { return Date() }
            return Date(timeIntervalSinceNow: -Double(now - t.nanoseconds) / 1e9)
        default: return Date()
        }
    }

    /// Completes a capture with `error`: the progress calls not made yet, one didFinishProcessing per
    /// image not delivered yet, then didFinishCapture.
    private func fail(_ job: Job, _ error: PhotoCaptureError) {
        guard !job.finished else { return }
        job.finished = true
        if job.bracketActive { bracketer?.endBracket(); job.bracketActive = false }
        endFlash(job)
        let d = job.delegate
        if !job.began { job.began = true; d.photoOutput(self, willBeginCaptureFor: job.resolved) }
        if !job.willCaptureSent { job.willCaptureSent = true; d.photoOutput(self, willCapturePhotoFor: job.resolved) }
        if !job.didCaptureSent { job.didCaptureSent = true; d.photoOutput(self, didCapturePhotoFor: job.resolved) }
        // A stream that ended in the middle of a burst or a bracket (a camera unplugged, a finite
        // source's last frame), or a capture withdrawn in the middle of one (Ctrl-C), keeps the
        // shots already taken: they are delivered, only the rest fail.
        if error == .sessionEnded || error == .cancelled, !job.shots.isEmpty { _ = deliverShots(job) }
        while job.delivered < job.resolved.expectedPhotoCount {
            job.delivered += 1
            d.photoOutput(self, didFinishProcessingPhoto: nil, resolved: job.resolved, error: error)
        }
        d.photoOutput(self, didFinishCaptureFor: job.resolved, error: error)
    }

    /// Ends a strobe the job started and records the driver's faults in its resolved settings.
    private func endFlash(_ job: Job) {
        guard job.flashLit, let f = flash else { return }
        job.flashLit = false
        job.resolved.flashFaults = f.end()
        if !job.resolved.flashFaults.isEmpty {
            logger.warning("photo \(job.settings.uniqueID): the flash driver reported faults: \(job.resolved.flashFaults)")
        }
    }

    /// A delegate that collects the photos for ``capturePhotos(settings:timeoutSeconds:)``.
    private final class Collector: PhotoCaptureDelegate, @unchecked Sendable {
        // @unchecked Sendable: state behind `lock`.
        let lock = ConditionLock()
        var photos: [CapturePhoto] = []
        var error: PhotoCaptureError?
        var done = false
        func photoOutput(_ output: PhotoOutput, didFinishProcessingPhoto photo: CapturePhoto?, resolved: ResolvedPhotoSettings, error: PhotoCaptureError?) {
            lock.withLock { if let photo { photos.append(photo) } }
        }
        func photoOutput(_ output: PhotoOutput, didFinishCaptureFor resolved: ResolvedPhotoSettings, error: PhotoCaptureError?) {
            lock.withLock { self.error = error; done = true; lock.broadcast() }
        }
        func wait(timeoutSeconds: Double) -> Bool {
            let deadline = monotonicNanoseconds() &+ UInt64(timeoutSeconds * 1e9)
            lock.lock(); defer { lock.unlock() }
            while !done { if !lock.wait(untilMonotonicNanoseconds: deadline) && !done { return false } }
            return true
        }
        func result() throws -> [CapturePhoto] {
            try lock.withLock { if let error, photos.isEmpty { throw error }; return photos }
        }
    }
}
