import ArgumentParser
import Foundation
import ViewfinderKit

/// `--audio DEVICE` and `--audio-format …`: a microphone for the session.
struct AudioOptions: ParsableArguments {
    @Option(help: "Capture sound from this ALSA device (default, hw:1,0, plughw:Loopback,1,0, a PCM from an asoundrc; see `viewfinder devices`). A replayed dump that holds sound brings it without this; `none` leaves it out.")
    var audio: String?
    @Option(help: "The sound stream to ask for, e.g. rate=48000,channels=2,format=s16|s32|float,period=480,periods=8 (unset: the device's own rate, channels and format; period 480 frames, 8 periods). A movie's track is 16-bit PCM: s32 and float are converted.")
    var audioFormat: String?

    func validate() throws {
        if let audio, audio.trimmingCharacters(in: .whitespaces).isEmpty { throw ValidationError("--audio needs a device name (default, hw:1,0, …) or none") }
        if let audioFormat, audioFormat.split(separator: ",", omittingEmptySubsequences: false).contains(where: { $0.trimmingCharacters(in: .whitespaces).isEmpty }) {
            throw ValidationError("--audio-format '\(audioFormat)' has an empty item (write key=value,key=value)")
        }
    }

    /// Opens the device and adds it to the session as its microphone. Without `--audio`, a
    /// replayed dump that holds sound brings its own (`--audio none` leaves it out).
    @discardableResult
    func attach(to session: CaptureSession, camera: CaptureDevice) throws -> AudioCaptureDevice? {
        if audio == "none" { return nil }
        guard let audio else {
            if audioFormat != nil { throw ValidationError("--audio-format needs --audio DEVICE") }
            guard let sound = try camera.recordedSound() else { return nil }
            try session.addInput(AudioDeviceInput(device: sound))
            return sound
        }
        let request = try audioFormat.map { try AudioStreamRequest(options: $0) } ?? AudioStreamRequest()
        let mic = try AudioCaptureDevice.open(audio, request: request)
        try session.addInput(AudioDeviceInput(device: mic))
        return mic
    }
}

/// The sound part of the JSON summaries.
func audioDictionary(_ s: AudioStatistics, format: AudioStreamFormat? = nil) -> [String: Any] {
    var d: [String: Any] = [
        "samples": s.frames, "periods": s.periods, "overruns": s.overruns, "frames_lost": s.framesLost,
        "ring_drops": s.ringDrops, "measured_rate_ppm": s.measuredPPM, "measured_rate_hz": s.measuredRate,
        "peak_dbfs": s.maximumPeakDBFS, "last_peak_dbfs": s.peakDBFS, "self_paced": s.selfPaced, "software_timestamps": s.softwareTimestamps,
    ]
    if let f = format { d["format"] = ["sample_format": f.sampleFormat.rawValue, "rate": f.sampleRate, "channels": f.channels] }
    if let e = s.error { d["error"] = e }
    return d
}

/// One line of sound figures: `live` for the status line (the level meter: the last half second's
/// peak), else for a summary after the run (the run's highest peak).
func audioText(_ s: AudioStatistics, live: Bool = false) -> String {
    var t = String(format: "audio peak %.1f dBFS  overruns %llu", live ? s.peakDBFS : s.maximumPeakDBFS, s.overruns)
    if s.ringDrops > 0 { t += "  ring drops \(s.ringDrops)" }
    t += String(format: "  clock %+.0f ppm", s.measuredPPM)
    return t
}

/// A device in `viewfinder devices --json`: cameras as they were, sound devices with `media_type`.
enum ListedDevice: Encodable {
    case video(DeviceInfo)
    case audio(AudioDeviceInfo)

    private struct Audio: Encodable {
        let media_type = "audio"
        let info: AudioDeviceInfo
        func encode(to encoder: any Encoder) throws {
            try info.encode(to: encoder)
            var c = encoder.container(keyedBy: Key.self)
            try c.encode(media_type, forKey: Key(stringValue: "media_type"))
        }
        struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
    }

    func encode(to encoder: any Encoder) throws {
        switch self {
        case .video(let d): try d.encode(to: encoder)
        case .audio(let a): try Audio(info: a).encode(to: encoder)
        }
    }

    /// Like `arecord -l` with `--dump-hw-params`, short.
    static func render(_ a: AudioDeviceInfo) -> String {
        var s = "\(a.id): \(a.name) [sound capture]\n"
        if a.sampleFormats.isEmpty && a.maximumRate == 0 { return s + "    (could not be opened to list its capabilities: \(a.unavailable ?? "busy, or needs a server"))\n" }
        s += "    formats: \(a.sampleFormats.map(\.rawValue).joined(separator: ", "))\n"
        s += "    rates: \(a.minimumRate)–\(a.maximumRate) Hz (common: \(a.rates.map(String.init).joined(separator: ", ")))\n"
        s += "    channels: \(a.minimumChannels)–\(a.maximumChannels)\n"
        return s
    }
}

/// After a recording with sound: what was captured and how it was kept in sync.
func recordedAudioText(_ s: AudioStatistics, _ a: MovieAudioAlignment?) -> String {
    var t = "sound: \(s.frames) samples captured, " + audioText(s)
    if let a {
        t += String(format: "; in the movie: %llu samples, %llu dropped and %llu repeated for sync, %llu of silence, max error %.2f ms", a.frames, a.dropped, a.repeated, a.silence, a.maximumError * 1000)
    }
    if let e = s.error { t += "; \(e)" }
    return t
}
