import CALSA
import Foundation
import Viewfinder

/// A sound capture device through ALSA: `default`, `hw:1,0`, `plughw:Loopback,1,0`, or any PCM an
/// asoundrc defines.
///
/// The PCM is opened (non-blocking) at init, so a missing or busy device is an error at once.
/// `configure` negotiates interleaved S16_LE/S32_LE/FLOAT_LE, the rate and the channels exactly
/// (an unsupported request is an error naming what the device offers), and turns on monotonic
/// timestamps (`SND_PCM_TSTAMP_TYPE_MONOTONIC`). `read` waits up to 100 ms for a period, recovers
/// overruns with `snd_pcm_recover` (and restarts capture), and stamps the first frame read from
/// `snd_pcm_htimestamp`: the time the device's position was last updated, minus the frames that
/// were captured after the ones read.
public final class ALSACaptureSource: AudioCaptureSource, @unchecked Sendable {
    // @unchecked Sendable: the PCM handle is used by one thread at a time (configure before the
    // engine starts, then only the capture thread; close after it has ended).
    public let info: AudioDeviceInfo
    private var pcm: OpaquePointer?
    private var format: AudioStreamFormat?
    public private(set) var periodFrames: Int = 0
    private var waited: UInt64 = 0
    /// Seconds without data after which a running device counts as gone.
    public var stallTimeout: Double = 2

    public init(name: String) throws {
        let handle = try ALSA.openCapture(name)
        pcm = handle
        info = ALSA.capabilities(of: handle, id: name, name: ALSA.describe(name))
    }

    deinit { close() }

    /// Negotiates the stream; a source closed by an earlier run opens its PCM again first.
    public func configure(_ request: AudioStreamRequest) throws -> AudioStreamFormat {
        // A request built in code is held to the parser's limits too (a million channels of the
        // null plugin allocated 62 GB).
        try request.validate()
        if pcm == nil { pcm = try ALSA.openCapture(info.id) }
        guard let pcm else { throw AudioError.notConfigured }
        var hw: OpaquePointer?
        snd_pcm_hw_params_malloc(&hw)
        defer { snd_pcm_hw_params_free(hw) }
        try check(snd_pcm_hw_params_any(pcm, hw), "snd_pcm_hw_params_any")
        try check(snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED), "set interleaved access")
        let sampleFormat = try pickFormat(request.sampleFormat, hw)
        try check(snd_pcm_hw_params_set_format(pcm, hw, ALSA.pcmFormat(sampleFormat)), "set format")
        let rate = request.sampleRate ?? ([48000, 44100].first { info.rates.contains($0) } ?? info.minimumRate)
        // ALSA takes rates, channels and sizes as 32-bit values: a request beyond them is
        // unsupported, not a trap in the conversion.
        guard rate > 0, rate <= Int(UInt32.max), snd_pcm_hw_params_test_rate(pcm, hw, UInt32(rate), 0) == 0 else {
            throw AudioError.unsupportedRate(device: info.id, requested: rate, range: info.minimumRate...max(info.minimumRate, info.maximumRate))
        }
        try check(snd_pcm_hw_params_set_rate(pcm, hw, UInt32(rate), 0), "set rate")
        let channels = request.channels ?? (info.minimumChannels...max(info.minimumChannels, info.maximumChannels) ~= 2 ? 2 : info.minimumChannels)
        guard channels > 0, channels <= Int(UInt32.max), snd_pcm_hw_params_test_channels(pcm, hw, UInt32(channels)) == 0 else {
            throw AudioError.unsupportedChannels(device: info.id, requested: channels, range: info.minimumChannels...max(info.minimumChannels, info.maximumChannels))
        }
        try check(snd_pcm_hw_params_set_channels(pcm, hw, UInt32(channels)), "set channels")
        guard (1...(1 << 24)).contains(request.periodFrames), (1...1024).contains(request.periods) else {
            throw AudioError.invalidRequest("period=\(request.periodFrames) periods=\(request.periods) (period 1...16777216 frames, periods 1...1024)")
        }
        var period = snd_pcm_uframes_t(request.periodFrames)
        var dir: Int32 = 0
        try check(snd_pcm_hw_params_set_period_size_near(pcm, hw, &period, &dir), "set period size")
        var buffer = snd_pcm_uframes_t(Int(period) * max(2, request.periods))
        try check(snd_pcm_hw_params_set_buffer_size_near(pcm, hw, &buffer), "set buffer size")
        try check(snd_pcm_hw_params(pcm, hw), "snd_pcm_hw_params")
        snd_pcm_hw_params_get_period_size(hw, &period, &dir)
        periodFrames = Int(period)
        try configureSoftware(pcm, period: period)
        let f = AudioStreamFormat(sampleFormat: sampleFormat, sampleRate: rate, channels: channels)
        format = f
        return f
    }

    private func pickFormat(_ requested: AudioSampleFormat?, _ hw: OpaquePointer?) throws -> AudioSampleFormat {
        let offered = AudioSampleFormat.allCases.filter { snd_pcm_hw_params_test_format(pcm, hw, ALSA.pcmFormat($0)) == 0 }
        if let r = requested {
            guard offered.contains(r) else {
                throw AudioError.unsupportedFormat(device: info.id, requested: r.rawValue, available: offered.isEmpty ? "none of S16_LE, S32_LE, FLOAT_LE" : offered.map(\.rawValue).joined(separator: ", "))
            }
            return r
        }
        guard let f = offered.first else { throw AudioError.unsupportedFormat(device: info.id, requested: "S16_LE, S32_LE or FLOAT_LE", available: "other formats only") }
        return f
    }

    /// Monotonic timestamps, wake-up at one period.
    private func configureSoftware(_ pcm: OpaquePointer, period: snd_pcm_uframes_t) throws {
        var sw: OpaquePointer?
        snd_pcm_sw_params_malloc(&sw)
        defer { snd_pcm_sw_params_free(sw) }
        try check(snd_pcm_sw_params_current(pcm, sw), "snd_pcm_sw_params_current")
        try check(snd_pcm_sw_params_set_tstamp_mode(pcm, sw, SND_PCM_TSTAMP_ENABLE), "enable timestamps")
        try check(snd_pcm_sw_params_set_tstamp_type(pcm, sw, SND_PCM_TSTAMP_TYPE_MONOTONIC), "monotonic timestamps")
        try check(snd_pcm_sw_params_set_avail_min(pcm, sw, period), "set avail_min")
        try check(snd_pcm_sw_params(pcm, sw), "snd_pcm_sw_params")
    }

    public func start() throws {
        guard let pcm, format != nil else { throw AudioError.notConfigured }
        let st = snd_pcm_state(pcm)
        if st != SND_PCM_STATE_PREPARED { try check(snd_pcm_prepare(pcm), "snd_pcm_prepare") }
        try check(snd_pcm_start(pcm), "snd_pcm_start")
        waited = 0
    }

    public func read(into buffer: UnsafeMutableRawPointer, frames: Int) throws -> AudioReadResult {
        guard let pcm, let format else { throw AudioError.notConfigured }
        var overruns = 0
        while true {
            let n = snd_pcm_readi(pcm, buffer, snd_pcm_uframes_t(frames))
            if n > 0 {
                waited = 0
                return AudioReadResult(frames: Int(n), timestamp: stamp(pcm, framesRead: Int(n), rate: format.sampleRate), overruns: overruns)
            }
            let err = Int32(n)
            if n == 0 || err == -vf_EAGAIN {
                let w = snd_pcm_wait(pcm, 100)
                if w > 0 { continue }
                if w == 0 {
                    waited += 100
                    if Double(waited) / 1000 >= stallTimeout { throw gone("no data for \(Int(stallTimeout)) s") }
                    return AudioReadResult(frames: 0, timestamp: nil, overruns: overruns)
                }
                try recover(pcm, w, &overruns)
                continue
            }
            try recover(pcm, err, &overruns)
        }
    }

    /// Overruns (-EPIPE) and suspends (-ESTRPIPE) are recovered and counted; a device that went
    /// away (-ENODEV, -EBADFD, -EIO, a disconnected state) ends capture.
    private func recover(_ pcm: OpaquePointer, _ err: Int32, _ overruns: inout Int) throws {
        if err == -vf_ENODEV || err == -vf_EBADFD || err == -vf_EIO || snd_pcm_state(pcm) == SND_PCM_STATE_DISCONNECTED {
            throw gone(String(cString: snd_strerror(err)))
        }
        guard err == -vf_EPIPE || err == -vf_ESTRPIPE else {
            throw AudioError.deviceFailed(device: info.id, call: "snd_pcm_readi", message: String(cString: snd_strerror(err)))
        }
        let rc = snd_pcm_recover(pcm, err, 1)
        guard rc >= 0 else { throw gone("recovery failed: \(String(cString: snd_strerror(rc)))") }
        overruns += 1
        let s = snd_pcm_start(pcm)
        if s < 0 && snd_pcm_state(pcm) != SND_PCM_STATE_RUNNING { throw gone("restart failed: \(String(cString: snd_strerror(s)))") }
    }

    private func gone(_ why: String) -> AudioError {
        StandardStreams.error("viewfinder: sound device '\(info.id)': \(why)\n")
        return AudioError.deviceGone(info.id)
    }

    /// The monotonic time of the first of the `framesRead` frames just read, from the device's
    /// timestamp of its position; nil when the device gives no timestamp.
    private func stamp(_ pcm: OpaquePointer, framesRead: Int, rate: Int) -> Timestamp? {
        var avail: snd_pcm_uframes_t = 0
        var ts = timespec()
        guard snd_pcm_htimestamp(pcm, &avail, &ts) == 0, ts.tv_sec != 0 || ts.tv_nsec != 0 else { return nil }
        let at = UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
        let back = UInt64(Double(Int(avail) + framesRead) * 1e9 / Double(rate))
        return Timestamp(nanoseconds: at > back ? at - back : 0)
    }

    public func close() {
        guard let p = pcm else { return }
        pcm = nil
        snd_pcm_drop(p)
        snd_pcm_close(p)
    }

    private func check(_ rc: Int32, _ what: String) throws {
        guard rc < 0 else { return }
        throw AudioError.deviceFailed(device: info.id, call: what, message: String(cString: snd_strerror(rc)))
    }
}
