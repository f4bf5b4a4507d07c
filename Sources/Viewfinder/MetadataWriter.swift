#if canImport(Glibc)
import Glibc
#endif

extension Frame {
    /// The frame's metadata as one JSON object (no trailing newline).
    public func metadataJSON() -> String {
        var s = "{\"sequence\":\(sequence),\"timestamp_ns\":\(timestamp.nanoseconds),\"clock\":\"\(timestamp.clock.rawValue)\",\"receive_ns\":\(receiveTime)"
        s += ",\"format\":\"\(format.pixelFormat.rawValue)\",\"width\":\(format.width),\"height\":\(format.height),\"bytes\":\(bytesUsed)"
        let m = metadata
        func num(_ k: String, _ v: Double?) { if let v, v.isFinite { s += ",\"\(k)\":\(v)" } }
        num("exposure_us", m.exposureTime)
        num("gain", m.gain)
        num("lens_position", m.lensPosition)
        num("white_balance_k", m.whiteBalance)
        if let f = m.focus { s += ",\"focus\":{\"laplacian_variance\":\(f.laplacianVariance),\"tenengrad\":\(f.tenengrad)}" }
        if let st = m.focusState { s += ",\"focus_state\":\"\(st.rawValue)\"" }
        if let st = m.exposureState { s += ",\"exposure_state\":\"\(st.rawValue)\"" }
        if let st = m.whiteBalanceState { s += ",\"white_balance_state\":\"\(st.rawValue)\"" }
        num("metered_luma", m.meteredLuma)
        num("exposure_error_ev", m.exposureError)
        func motion(_ k: String, _ v: MotionEstimate?) {
            if let v { s += ",\"\(k)\":{\"dx\":\(v.dx),\"dy\":\(v.dy),\"angle\":\(v.angle),\"scale\":\(v.scale),\"confidence\":\(v.confidence)}" }
        }
        motion("motion", m.motion)
        motion("correction", m.correction)
        if let t = m.truth {
            s += ",\"truth\":{\"shake_x\":\(t.shakeX),\"shake_y\":\(t.shakeY),\"shake_angle\":\(t.shakeAngle),\"in_focus_lens_position\":\(t.inFocusLensPosition),\"scene_luminance\":\(t.sceneLuminance),\"exposure_us\":\(t.appliedExposure),\"gain\":\(t.appliedGain),\"lens_position\":\(t.appliedLensPosition),\"defocus_blur\":\(t.defocusBlur),\"mean_luma\":\(t.renderedMeanLuma)"
            if t.colorTemperature > 0 { s += ",\"colortemp_k\":\(t.colorTemperature)" }
            s += "}"
        }
        if m.droppedBefore > 0 { s += ",\"dropped_before\":\(m.droppedBefore)" }
        s += ",\"stage_ns\":\(m.stageNanoseconds)"
        for (k, v) in m.custom.entries where v.isFinite { s += ",\"\(k.description)\":\(v)" }
        if m.custom.refused > 0 { s += ",\"custom_refused\":\(m.custom.refused)" }
        s += "}"
        return s
    }
}

/// Writes one JSON line of metadata per frame (`--metadata frames.jsonl`). Runs on its own
/// thread like any output; a full disk ends the writing with a logged error, not the capture.
///
/// Lines are buffered (4 KiB, as stdio did: a reader on a fifo gets them in batches of about ten
/// frames) and written with `write(2)`; when a write fails, a regular file is
/// cut back to its last whole line, ``lines`` counts the lines that are in the file, and
/// ``onFailure`` hears it at once.
public final class MetadataWriter: FrameConsumer, @unchecked Sendable {
    // @unchecked Sendable: the buffer, `fd` and `failure` are touched only on the consumer thread
    // (start, consume, finish), then read after the engine has joined that thread.
    public let consumerName = "metadata"
    public let path: String
    public var ringCapacity: Int { 16 }
    public var overflowPolicy: OverflowPolicy { .dropNewest }
    private var file: WholeLineFile?
    public private(set) var failure: String?
    /// Lines in the file (whole lines only).
    public var lines: Int { file?.lines ?? 0 }
    /// Called once, on the output's thread, when writing fails (set before the session starts).
    public var onFailure: (@Sendable (String) -> Void)?

    public init(path: String) { self.path = path }

    public func start(configuration: StreamConfiguration) throws {
        // A fifo or pipe whose reader goes away gives this thread EPIPE, not the process SIGPIPE.
        var pipeSignal = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeSignal, nil)
        // Opened in place, without waiting for a fifo's reader (`StreamFile`).
        file = WholeLineFile(path: path, fd: try StreamFile.openForWriting(path), flushBytes: 4096)
    }

    public func consume(_ frame: Frame) {
        guard let file, failure == nil else { return }
        if !file.append(frame.metadataJSON()) { failed(file) }
    }

    public func finish(error: (any Error)?) {
        guard let file else { return }
        if failure == nil, !file.flush() { failed(file) }
        file.close()
    }

    private func failed(_ file: WholeLineFile) {
        guard failure == nil, let message = file.failureMessage, let e = file.failure else { return }
        failure = String(cString: strerror(e))
        onFailure?(message)
    }
}

/// Discards frames (a sink that measures the engine).
public final class NullConsumer: FrameConsumer, Sendable {
    public let consumerName: String
    public init(name: String = "null") { consumerName = name }
    public func consume(_ frame: Frame) {}
}

extension MetadataWriter: CaptureOutput {
    public var acceptedMediaTypes: Set<MediaType> { [.video] }
}

extension NullConsumer: CaptureOutput {
    public var acceptedMediaTypes: Set<MediaType> { [.video] }
}
