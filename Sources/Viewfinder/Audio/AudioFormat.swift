/// The sample encodings the audio engine captures (ALSA's S16_LE, S32_LE, FLOAT_LE).
public enum AudioSampleFormat: String, Sendable, Codable, CaseIterable {
    case s16 = "S16_LE"
    case s32 = "S32_LE"
    case float32 = "FLOAT_LE"

    public var bytesPerSample: Int { self == .s16 ? 2 : 4 }

    /// Parses `s16`, `S16_LE`, `s32`, `float`, `FLOAT_LE`, …
    public init?(name: String) {
        switch name.lowercased() {
        case "s16", "s16_le": self = .s16
        case "s32", "s32_le": self = .s32
        case "float", "float32", "f32", "float_le": self = .float32
        default: return nil
        }
    }
}

/// What an audio stream carries: interleaved frames of `channels` samples.
public struct AudioStreamFormat: Sendable, Equatable, Codable, CustomStringConvertible {
    public var sampleFormat: AudioSampleFormat
    public var sampleRate: Int
    public var channels: Int
    public init(sampleFormat: AudioSampleFormat, sampleRate: Int, channels: Int) {
        self.sampleFormat = sampleFormat; self.sampleRate = sampleRate; self.channels = channels
    }
    public var bytesPerFrame: Int { sampleFormat.bytesPerSample * channels }
    public var description: String { "\(sampleFormat.rawValue) \(sampleRate) Hz \(channels) ch" }
}

/// What to ask a sound device for; nil fields take the device's preference (48 kHz, 2 channels,
/// S16_LE when it has them).
public struct AudioStreamRequest: Sendable, Equatable {
    public var sampleFormat: AudioSampleFormat?
    public var sampleRate: Int?
    public var channels: Int?
    /// Frames per period (one read of the capture thread); the device may round it.
    public var periodFrames: Int = 480
    /// Periods in the device's buffer.
    public var periods: Int = 8
    public init(sampleFormat: AudioSampleFormat? = nil, sampleRate: Int? = nil, channels: Int? = nil) {
        self.sampleFormat = sampleFormat; self.sampleRate = sampleRate; self.channels = channels
    }

    /// Parses `rate=48000,channels=2,format=s16,period=480,periods=8` (the part after the device name).
    public init(options: String) throws {
        self.init()
        var seen = Set<String>()
        for item in options.split(separator: ",") where !item.isEmpty {
            let kv = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2 else { throw AudioError.invalidRequest("'\(item)' is not key=value") }
            // As device and stage options: a key given twice is a mistake, not "the last wins".
            guard seen.insert(kv[0]).inserted else { throw AudioError.invalidRequest("\(kv[0]) given twice") }
            func int() throws -> Int {
                guard let v = Int(kv[1]), v > 0 else { throw AudioError.invalidRequest("\(kv[0])=\(kv[1]) is not a positive integer") }
                return v
            }
            switch kv[0] {
            case "rate": sampleRate = try int()
            case "channels": channels = try int()
            case "period": periodFrames = try int()
            case "periods": periods = try int()
            case "format":
                guard let f = AudioSampleFormat(name: kv[1]) else { throw AudioError.invalidRequest("format \(kv[1]) (use s16, s32 or float)") }
                sampleFormat = f
            default: throw AudioError.invalidRequest("unknown option '\(kv[0])' (rate, channels, format, period, periods)")
            }
        }
        try validate()
    }

    /// Checks the request against what any sound card does: a rate of 1 Hz (a period of 480
    /// frames every 8 minutes: a run that never stopped) or a million channels (62 GB of buffers:
    /// a crash) is a mistake. The parser and every capture source's `configure` call it.
    public func validate() throws {
        if let r = sampleRate, !Self.rates.contains(r) {
            throw AudioError.invalidRequest("rate=\(r) (\(Self.rates.lowerBound)...\(Self.rates.upperBound) Hz)")
        }
        if let c = channels, !Self.channelCounts.contains(c) {
            throw AudioError.invalidRequest("channels=\(c) (\(Self.channelCounts.lowerBound)...\(Self.channelCounts.upperBound))")
        }
        if !(16...(1 << 20)).contains(periodFrames) || !(2...1024).contains(periods) {
            throw AudioError.invalidRequest("period=\(periodFrames) periods=\(periods) (period 16...1048576 frames, periods 2...1024)")
        }
        // (Against the rate asked for, else the usual 48 kHz; a card that gives a lower rate
        // gets a longer period.)
        let r = sampleRate ?? 48_000
        if Double(periodFrames) / Double(r) > 1 {
            throw AudioError.invalidRequest("period=\(periodFrames) at \(r) Hz is \(String(format: "%.4f", Double(periodFrames) / Double(r))) s; at most 1 s (\(r) frames)")
        }
    }

    /// Sample rates a request may name, Hz.
    public static let rates = 1000...768_000
    /// Channel counts a request may name.
    public static let channelCounts = 1...64
}

/// A sound capture device and what it can do.
public struct AudioDeviceInfo: Sendable, Equatable, Codable {
    /// The name to open it by (`hw:1,0`, `default`, a PCM from an asoundrc).
    public var id: String
    public var name: String
    /// Card and device numbers for kernel devices.
    public var card: Int?
    public var device: Int?
    public var sampleFormats: [AudioSampleFormat]
    public var minimumRate: Int
    public var maximumRate: Int
    /// The common rates (8 k … 192 kHz) the device accepts.
    public var rates: [Int]
    public var minimumChannels: Int
    public var maximumChannels: Int
    /// Why the device could not be opened to read its capabilities (busy, missing, an open that
    /// did not return); nil when it opened.
    public var unavailable: String?
    public init(id: String, name: String, card: Int? = nil, device: Int? = nil, sampleFormats: [AudioSampleFormat] = [], minimumRate: Int = 0, maximumRate: Int = 0,
                rates: [Int] = [], minimumChannels: Int = 0, maximumChannels: Int = 0) {
        self.id = id; self.name = name; self.card = card; self.device = device; self.sampleFormats = sampleFormats
        self.minimumRate = minimumRate; self.maximumRate = maximumRate; self.rates = rates
        self.minimumChannels = minimumChannels; self.maximumChannels = maximumChannels
    }
}

/// Errors of sound capture. Each names the device and what is wrong.
public enum AudioError: Error, Equatable, CustomStringConvertible {
    case deviceNotFound(String)
    case deviceBusy(String)
    case unsupportedFormat(device: String, requested: String, available: String)
    case unsupportedRate(device: String, requested: Int, range: ClosedRange<Int>)
    case unsupportedChannels(device: String, requested: Int, range: ClosedRange<Int>)
    case deviceFailed(device: String, call: String, message: String)
    case deviceGone(String)
    case invalidRequest(String)
    case notConfigured

    public var description: String {
        switch self {
        case .deviceNotFound(let d): return "sound device '\(d)' does not exist (see `viewfinder devices`)"
        case .deviceBusy(let d): return "sound device '\(d)' is busy (another program is using it)"
        case .unsupportedFormat(let d, let r, let a): return "sound device '\(d)' cannot capture \(r) (it offers \(a))"
        case .unsupportedRate(let d, let r, let range): return "sound device '\(d)' cannot capture at \(r) Hz (it offers \(range.lowerBound)–\(range.upperBound) Hz)"
        case .unsupportedChannels(let d, let r, let range): return "sound device '\(d)' cannot capture \(r) channels (it offers \(range.lowerBound)–\(range.upperBound))"
        case .deviceFailed(let d, let c, let m): return "sound device '\(d)': \(c) failed: \(m)"
        case .deviceGone(let d): return "sound device '\(d)' disappeared"
        case .invalidRequest(let m): return "invalid sound request: \(m)"
        case .notConfigured: return "the sound device is not configured"
        }
    }
}

/// One period read from a device, as the capture thread hands it on: where its samples are, how
/// many frames, and when its first frame was captured (`CLOCK_MONOTONIC`, as video frames).
public struct AudioPeriod: Sendable {
    public var frames: Int
    /// Capture time of the first frame.
    public var timestamp: Timestamp
    /// Frames captured by the device before this period (counting frames lost to overruns when the
    /// device's position tells).
    public var position: UInt64
    /// True when frames were lost right before this period (an overrun was recovered).
    public var discontinuity: Bool
    public init(frames: Int, timestamp: Timestamp, position: UInt64, discontinuity: Bool = false) {
        self.frames = frames; self.timestamp = timestamp; self.position = position; self.discontinuity = discontinuity
    }
}
