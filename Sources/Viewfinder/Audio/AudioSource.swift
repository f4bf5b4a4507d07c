/// What one read of a sound device gave.
public struct AudioReadResult: Sendable, Equatable {
    /// Frames written into the buffer (0 after a recovered overrun that produced none).
    public var frames: Int
    /// Capture time of the first frame read, from the device's own timestamp (ALSA `htstamp`,
    /// monotonic); nil when the device gives none (the engine then stamps by the clock).
    public var timestamp: Timestamp?
    /// Overruns recovered during this read: frames were lost before these.
    public var overruns: Int
    /// A finite source (a recording replayed) has nothing after these frames.
    public var endOfStream: Bool
    /// These frames do not follow the previous ones on the device's clock although none were lost
    /// (a replay starting its next loop): the period is marked a discontinuity, as after an
    /// overrun, without counting one.
    public var discontinuity: Bool
    public init(frames: Int, timestamp: Timestamp?, overruns: Int = 0, endOfStream: Bool = false, discontinuity: Bool = false) {
        self.frames = frames; self.timestamp = timestamp; self.overruns = overruns; self.endOfStream = endOfStream
        self.discontinuity = discontinuity
    }
}

/// A sound capture device: ALSA in `ViewfinderAudio`, test doubles elsewhere.
///
/// The audio engine calls `configure`, `start`, then `read` in a loop on its capture thread, and
/// `close` at the end. `read` blocks until frames are there; it recovers overruns itself (counting
/// them in the result) and throws ``AudioError/deviceGone(_:)`` when the device disappears.
public protocol AudioCaptureSource: AnyObject, Sendable {
    var info: AudioDeviceInfo { get }
    /// Negotiates format, rate, channels and period with the device; returns what it will deliver.
    func configure(_ request: AudioStreamRequest) throws -> AudioStreamFormat
    /// Frames per read the device settled on (after `configure`).
    var periodFrames: Int { get }
    func start() throws
    /// Reads up to `frames` frames into `buffer` (which holds `frames` × bytes per frame).
    func read(into buffer: UnsafeMutableRawPointer, frames: Int) throws -> AudioReadResult
    /// Stops capture and closes the device. Safe to call more than once.
    func close()
    /// True for a finite source that ends by itself (the sound of a replayed recording, which ends
    /// with the video it belongs to): when the session stops, the engine goes on reading it until
    /// `read` reports ``AudioReadResult/endOfStream`` (for at most two seconds), so the sound of the
    /// last frames is kept. False (the default) for devices, which stop at once.
    var endsByItself: Bool { get }
}

extension AudioCaptureSource {
    public var endsByItself: Bool { false }
}

/// Receives audio from a session's microphone. Called on the audio engine's delivery thread (not
/// the real-time capture thread): `prepareAudio` before the session starts (the format is known
/// then, so a movie can create its audio track), then one `consumeAudio` per period, then
/// `finishAudio`.
public protocol AudioConsumer: AnyObject, Sendable {
    func prepareAudio(format: AudioStreamFormat)
    /// `buffer` is valid during the call only.
    func consumeAudio(_ buffer: AudioBuffer)
    func finishAudio(error: (any Error)?)
}

/// One period of captured audio handed to consumers: the samples (valid during the call), their
/// format, when and where in the device's stream they were captured, and the engine's current
/// estimate of the device's clock.
public struct AudioBuffer {
    public let data: UnsafeRawBufferPointer
    public let format: AudioStreamFormat
    public let period: AudioPeriod
    /// The device's sample rate measured against `CLOCK_MONOTONIC`, frames per second.
    public let measuredRate: Double
    public var frames: Int { period.frames }
    public init(data: UnsafeRawBufferPointer, format: AudioStreamFormat, period: AudioPeriod, measuredRate: Double) {
        self.data = data; self.format = format; self.period = period; self.measuredRate = measuredRate
    }
}
