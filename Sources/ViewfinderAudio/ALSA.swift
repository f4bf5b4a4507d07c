import CALSA
import Foundation
import Viewfinder

/// ALSA helpers: device enumeration, capability probing, error mapping.
public enum ALSA {
    /// The common rates a device is checked for.
    public static let commonRates = [8000, 11025, 16000, 22050, 32000, 44100, 48000, 88200, 96000, 176400, 192000]

    /// ALSA writes its own errors to stderr (a missing card, a bad asoundrc); the engine reports
    /// errors itself, once.
    public static func silenceErrors() { vf_alsa_silence_errors() }

    static func pcmFormat(_ f: AudioSampleFormat) -> snd_pcm_format_t {
        switch f {
        case .s16: return SND_PCM_FORMAT_S16_LE
        case .s32: return SND_PCM_FORMAT_S32_LE
        case .float32: return SND_PCM_FORMAT_FLOAT_LE
        }
    }

    /// Opens a PCM for capture; a failure is the typed error `openError` gives, with what ALSA's
    /// configuration files said when they are why.
    ///
    /// The open runs on a thread of its own and is given `timeout` seconds: `SND_PCM_NONBLOCK` does
    /// not reach everything a PCM does while it opens — a `file` plugin whose `infile` is a FIFO
    /// with no writer blocks in `open(2)`, a server plugin can wait on a server that does not
    /// answer — and such a PCM hung `viewfinder devices` (every device unlisted) and `record`
    /// (no message, no file). An open that does not return in time is an error naming the device;
    /// if it returns later, the thread closes what it opened.
    static func openCapture(_ name: String, timeout: Double = 5) throws(AudioError) -> OpaquePointer {
        final class Attempt: @unchecked Sendable {
            let lock = NSLock()
            let done = DispatchSemaphore(value: 0)
            var handle: OpaquePointer?
            var rc: Int32 = 0
            var configuration = ""
            var abandoned = false
        }
        let attempt = Attempt()
        let thread = Thread {
            silenceErrors()
            vf_alsa_clear_config_errors()
            var handle: OpaquePointer?
            let rc = snd_pcm_open(&handle, name, SND_PCM_STREAM_CAPTURE, SND_PCM_NONBLOCK)
            let configuration = rc < 0 ? String(cString: vf_alsa_config_errors()) : ""
            let abandoned = attempt.lock.withLock { () -> Bool in
                attempt.handle = handle; attempt.rc = rc; attempt.configuration = configuration
                return attempt.abandoned
            }
            if abandoned, rc >= 0, let handle { snd_pcm_close(handle) }
            attempt.done.signal()
        }
        thread.name = "vf-alsa-open"
        thread.start()
        if attempt.done.wait(timeout: .now() + timeout) == .timedOut {
            // Still blocked: given up on; the thread closes the PCM if the open ever succeeds.
            let finished = attempt.lock.withLock { () -> Bool in
                if attempt.handle != nil || attempt.rc != 0 { return true }
                attempt.abandoned = true
                return false
            }
            if !finished {
                throw .deviceFailed(device: name, call: "snd_pcm_open",
                                    message: "did not return within \(String(format: "%g", timeout)) s (a PCM that waits in its open: a `file` plugin reading a FIFO that has no writer, a sound server that does not answer)")
            }
        }
        let (handle, rc, configuration) = attempt.lock.withLock { (attempt.handle, attempt.rc, attempt.configuration) }
        guard rc >= 0, let handle else { throw openError(name, rc, configuration: configuration) }
        return handle
    }

    /// Why a listed device could not be opened, in a few words for `devices`.
    static func whyUnopenable(_ error: AudioError) -> String {
        switch error {
        case .deviceBusy: return "busy (another program is using it)"
        case .deviceNotFound: return "its card or file is missing"
        case .deviceFailed(_, _, let m): return m
        default: return "\(error)"
        }
    }

    /// The error of a failed `snd_pcm_open`. `configuration`: ALSA's messages about its own
    /// configuration files during the open — a file that does not parse makes every name fail
    /// (EINVAL), which is not "does not exist".
    static func openError(_ name: String, _ rc: Int32, configuration: String = "") -> AudioError {
        if rc == -vf_EBUSY { return .deviceBusy(name) }
        if !configuration.isEmpty, rc == -vf_EINVAL {
            return .deviceFailed(device: name, call: "snd_pcm_open", message: "ALSA's configuration could not be read: \(configuration)")
        }
        if rc == -vf_ENOENT || rc == -vf_ENODEV || rc == -vf_EINVAL { return .deviceNotFound(name) }
        return .deviceFailed(device: name, call: "snd_pcm_open", message: String(cString: snd_strerror(rc)))
    }

    /// What an open PCM can capture: formats among S16_LE/S32_LE/FLOAT_LE, rate range and the
    /// common rates in it, channel range.
    static func capabilities(of pcm: OpaquePointer, id: String, name: String) -> AudioDeviceInfo {
        var info = AudioDeviceInfo(id: id, name: name)
        let (card, device) = hwNumbers(id)
        info.card = card; info.device = device
        var hw: OpaquePointer?
        snd_pcm_hw_params_malloc(&hw)
        defer { snd_pcm_hw_params_free(hw) }
        guard snd_pcm_hw_params_any(pcm, hw) >= 0 else { return info }
        info.sampleFormats = AudioSampleFormat.allCases.filter { snd_pcm_hw_params_test_format(pcm, hw, pcmFormat($0)) == 0 }
        var lo: UInt32 = 0, hi: UInt32 = 0
        var dir: Int32 = 0
        if snd_pcm_hw_params_get_rate_min(hw, &lo, &dir) == 0, snd_pcm_hw_params_get_rate_max(hw, &hi, &dir) == 0 {
            info.minimumRate = Int(lo); info.maximumRate = Int(hi)
        }
        info.rates = commonRates.filter { snd_pcm_hw_params_test_rate(pcm, hw, UInt32($0), 0) == 0 }
        if snd_pcm_hw_params_get_channels_min(hw, &lo) == 0, snd_pcm_hw_params_get_channels_max(hw, &hi) == 0 {
            info.minimumChannels = Int(lo); info.maximumChannels = Int(min(hi, 64))
        }
        return info
    }

    /// `hw:1,0` → (1, 0).
    static func hwNumbers(_ id: String) -> (Int?, Int?) {
        guard let colon = id.firstIndex(of: ":") else { return (nil, nil) }
        let parts = id[id.index(after: colon)...].split(separator: ",")
        return (parts.first.flatMap { Int($0) }, parts.count > 1 ? Int(parts[1]) : nil)
    }

    /// A human name for a PCM: the card and device names for `hw:`, else the hint's description.
    static func describe(_ id: String) -> String {
        let (card, device) = hwNumbers(id)
        if let card {
            var name: UnsafeMutablePointer<CChar>?
            if snd_card_get_name(Int32(card), &name) == 0, let name {
                defer { free(name) }
                return "\(String(cString: name)) (card \(card), device \(device ?? 0))"
            }
        }
        return hints().first { $0.name == id }?.description ?? id
    }

    /// `snd_device_name_hint` for PCMs that can capture: name and description.
    public static func hints() -> [(name: String, description: String)] {
        silenceErrors()
        var raw: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        guard snd_device_name_hint(-1, "pcm", &raw) == 0, let raw else { return [] }
        defer { snd_device_name_free_hint(raw) }
        var out: [(String, String)] = []
        var i = 0
        while let h = raw[i] {
            i += 1
            func get(_ key: String) -> String? {
                guard let p = snd_device_name_get_hint(h, key) else { return nil }
                defer { free(p) }
                return String(cString: p)
            }
            guard let name = get("NAME") else { continue }
            let io = get("IOID")
            if io == "Output" { continue }
            out.append((name, (get("DESC") ?? name).replacingOccurrences(of: "\n", with: ", ")))
        }
        return out
    }

    /// Every kernel capture device (`hw:CARD,DEV` over all cards).
    public static func hardwareCaptureDevices() -> [String] {
        silenceErrors()
        var ids: [String] = []
        var card: Int32 = -1
        while snd_card_next(&card) == 0 && card >= 0 {
            var ctl: OpaquePointer?
            guard snd_ctl_open(&ctl, "hw:\(card)", 0) == 0, let ctl else { continue }
            defer { snd_ctl_close(ctl) }
            var dev: Int32 = -1
            var pinfo: OpaquePointer?
            snd_pcm_info_malloc(&pinfo)
            defer { snd_pcm_info_free(pinfo) }
            while snd_ctl_pcm_next_device(ctl, &dev) == 0 && dev >= 0 {
                snd_pcm_info_set_device(pinfo, UInt32(dev))
                snd_pcm_info_set_subdevice(pinfo, 0)
                snd_pcm_info_set_stream(pinfo, SND_PCM_STREAM_CAPTURE)
                if snd_ctl_pcm_info(ctl, pinfo) == 0 { ids.append("hw:\(card),\(dev)") }
            }
        }
        return ids
    }

    /// The capture devices and what they can do: every kernel device (`hw:C,D`, probed) and every
    /// PCM name ALSA's hints offer for capture (probed when it can be opened without blocking;
    /// listed with its description otherwise).
    public static func discover() -> [AudioDeviceInfo] {
        var out: [AudioDeviceInfo] = []
        for id in hardwareCaptureDevices() { out.append(probe(id)) }
        for h in hints() where !out.contains(where: { $0.id == h.name }) {
            var info = probe(h.name)
            info.name = h.description
            out.append(info)
        }
        return out
    }

    /// Opens `id` briefly to read its capabilities; a busy or unopenable device is listed by name.
    public static func probe(_ id: String) -> AudioDeviceInfo {
        let pcm: OpaquePointer
        do { pcm = try openCapture(id, timeout: 2) } catch {
            var info = AudioDeviceInfo(id: id, name: describe(id))
            info.unavailable = Self.whyUnopenable(error)
            return info
        }
        defer { snd_pcm_close(pcm) }
        return capabilities(of: pcm, id: id, name: describe(id))
    }
}

extension AudioCaptureDevice {
    /// Opens a microphone by ALSA name (`default`, `hw:1,0`, `plughw:Loopback,1,0`, a PCM from an
    /// asoundrc); the device is held from now on, so a busy or missing device throws here.
    public static func open(_ name: String, request: AudioStreamRequest = AudioStreamRequest()) throws -> AudioCaptureDevice {
        AudioCaptureDevice(source: try ALSACaptureSource(name: name), request: request)
    }

    /// The default microphone: ALSA's `default` PCM when it can capture, else the first kernel
    /// capture device.
    public static func defaultDevice() throws -> AudioCaptureDevice {
        if let d = try? open("default") { return d }
        guard let first = ALSA.hardwareCaptureDevices().first else { throw AudioError.deviceNotFound("default") }
        return try open(first)
    }
}
