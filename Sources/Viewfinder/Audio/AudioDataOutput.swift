import Dispatch
import Synchronization

/// A period of audio owned by the receiver (AVFoundation's `CMSampleBuffer` for sound).
public struct AudioSampleBuffer: Sendable {
    /// Interleaved samples in ``format``.
    public let data: [UInt8]
    public let format: AudioStreamFormat
    public let frames: Int
    /// Capture time of the first frame (`CLOCK_MONOTONIC`, as video frames).
    public let timestamp: Timestamp
    /// Frames the device captured before this one (frames lost in overruns included).
    public let position: UInt64
    /// Frames were lost just before this buffer.
    public let discontinuity: Bool
    /// The device's rate measured against the monotonic clock when this buffer arrived.
    public let measuredRate: Double

    init(_ b: AudioBuffer) {
        data = Array(b.data); format = b.format; frames = b.frames; timestamp = b.period.timestamp
        position = b.period.position; discontinuity = b.period.discontinuity; measuredRate = b.measuredRate
    }

    /// The samples as signed 16-bit (converted from S32 or float when captured so).
    public var int16Samples: [Int16] {
        var out: [Int16] = []
        out.reserveCapacity(frames * format.channels)
        data.withUnsafeBytes { AudioSamples.appendS16($0, format: format.sampleFormat, to: &out) }
        return out
    }
}

/// Receives audio from an ``AudioDataOutput`` (AVFoundation's
/// `AVCaptureAudioDataOutputSampleBufferDelegate`).
public protocol AudioDataOutputDelegate: AnyObject, Sendable {
    func audioDataOutput(_ output: AudioDataOutput, didOutput buffer: AudioSampleBuffer)
}

/// Delivers the session's microphone to a delegate on a chosen queue and as an `AsyncSequence`
/// (AVFoundation's `AVCaptureAudioDataOutput`), the counterpart of ``VideoDataOutput``.
///
/// Buffers are copies (the engine's slots go back to the capture thread at once). A delegate
/// queue or an async consumer that falls behind is bounded, and what it loses is counted in
/// ``droppedBuffers``: at most ``maximumQueuedBuffers`` wait for the delegate (a buffer that finds
/// that many waiting is not queued), and a ``buffers(bufferingNewest:)`` sequence keeps its
/// newest `limit` (the older ones its consumer had not taken are dropped).
public final class AudioDataOutput: CaptureOutput, AudioConsumer, @unchecked Sendable {
    // @unchecked Sendable: delegate, queue and continuations are behind `state`; counts are atomic.
    public let consumerName: String
    public var acceptedMediaTypes: Set<MediaType> { [.audio] }
    public let maximumQueuedBuffers: Int

    private struct State {
        var delegate: (any AudioDataOutputDelegate)?
        var queue: DispatchQueue?
        var continuations: [UInt64: AsyncStream<AudioSampleBuffer>.Continuation] = [:]
        var nextID: UInt64 = 0
        var format: AudioStreamFormat?
    }
    private let state = LockedBox(State())
    private let queued = Atomic<Int>(0)
    private let delivered = Atomic<UInt64>(0)
    private let dropped = Atomic<UInt64>(0)

    public init(name: String = "audio-data", maximumQueuedBuffers: Int = 256) {
        consumerName = name
        self.maximumQueuedBuffers = maximumQueuedBuffers
    }

    /// Sets the delegate and the queue its callbacks run on (a private serial queue when nil).
    public func setSampleBufferDelegate(_ delegate: (any AudioDataOutputDelegate)?, queue: DispatchQueue?) {
        state.withLock { $0.delegate = delegate; $0.queue = delegate == nil ? nil : (queue ?? DispatchQueue(label: "viewfinder.audio-data")) }
    }

    /// The same as ``setSampleBufferDelegate(_:queue:)``, by the video data output's name.
    public func setDelegate(_ delegate: (any AudioDataOutputDelegate)?, queue: DispatchQueue?) {
        setSampleBufferDelegate(delegate, queue: queue)
    }

    /// The audio buffers as an async sequence; it ends when the session's audio stops.
    public func buffers(bufferingNewest limit: Int = 256) -> AsyncStream<AudioSampleBuffer> {
        AsyncStream(bufferingPolicy: .bufferingNewest(limit)) { continuation in
            let id = state.withLock { s -> UInt64 in
                let id = s.nextID; s.nextID += 1
                s.continuations[id] = continuation
                return id
            }
            continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.continuations.removeValue(forKey: id) } }
        }
    }

    /// The format of the session's microphone, once it is running.
    public var format: AudioStreamFormat? { state.withLock { $0.format } }
    /// Buffers handed to the delegate's queue or to a sequence.
    public var deliveredBuffers: UInt64 { delivered.load(ordering: .relaxed) }
    /// Buffers the delegate's queue or a sequence's consumer lost by falling behind (each loss
    /// counted once per consumer).
    public var droppedBuffers: UInt64 { dropped.load(ordering: .relaxed) }

    // MARK: AudioConsumer

    public func prepareAudio(format: AudioStreamFormat) { state.withLock { $0.format = format } }

    public func consumeAudio(_ buffer: AudioBuffer) {
        let (delegate, queue, conts) = state.withLock { ($0.delegate, $0.queue, Array($0.continuations.values)) }
        guard delegate != nil || !conts.isEmpty else { return }
        let b = AudioSampleBuffer(buffer)
        for c in conts {
            if case .dropped = c.yield(b) { dropped.add(1, ordering: .relaxed) }
        }
        guard let delegate, let queue else { delivered.add(1, ordering: .relaxed); return }
        if queued.load(ordering: .relaxed) >= maximumQueuedBuffers {
            dropped.add(1, ordering: .relaxed)
            if !conts.isEmpty { delivered.add(1, ordering: .relaxed) }
            return
        }
        delivered.add(1, ordering: .relaxed)
        queued.add(1, ordering: .relaxed)
        queue.async { [self] in
            delegate.audioDataOutput(self, didOutput: b)
            queued.subtract(1, ordering: .relaxed)
        }
    }

    public func finishAudio(error: (any Error)?) {
        let conts = state.withLock { s -> [AsyncStream<AudioSampleBuffer>.Continuation] in
            defer { s.continuations.removeAll() }
            return Array(s.continuations.values)
        }
        for c in conts { c.finish() }
    }

    // MARK: FrameConsumer (an audio output takes no video)

    public func consume(_ frame: Frame) {}
}

/// A microphone (the audio side of AVFoundation's `AVCaptureDevice`): a sound capture source and
/// the stream it is asked for.
public final class AudioCaptureDevice: @unchecked Sendable {
    // @unchecked Sendable: `request` is guarded by `box`.
    public let source: any AudioCaptureSource
    public var uniqueID: String { source.info.id }
    public var localizedName: String { source.info.name }
    public var info: AudioDeviceInfo { source.info }
    private let box: LockedBox<AudioStreamRequest>

    public init(source: any AudioCaptureSource, request: AudioStreamRequest = AudioStreamRequest()) {
        self.source = source
        box = LockedBox(request)
    }

    /// The stream the session asks the device for when it starts.
    public var request: AudioStreamRequest {
        get { box.withLock { $0 } }
        set { box.withLock { $0 = newValue } }
    }
}

/// An input that takes sound from a microphone (AVFoundation's `AVCaptureDeviceInput` for an
/// audio device). A session has at most one.
public final class AudioDeviceInput: CaptureInput, @unchecked Sendable {
    public let device: AudioCaptureDevice
    public init(device: AudioCaptureDevice) {
        self.device = device
        super.init(mediaType: .audio)
    }
}
