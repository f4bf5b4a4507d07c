import CALSA
import Foundation
import Testing
import ViewfinderKit

/// Plays a click every second into one end of snd-aloop (`hw:Loopback,0,0`) and notes, from the
/// playback stream's monotonic timestamps, when each click enters the cable.
final class ClickPlayer: @unchecked Sendable {
    // @unchecked Sendable: `clicks` is behind `box`; the PCM is used by the player thread only.
    let rate = 48000
    private let box = LockedBox<[UInt64]>([])
    private let stopBox = LockedBox(false)
    let underruns = LockedBox(0)
    private var thread: EngineThread?
    var clickTimes: [UInt64] { box.withLock { $0 } }

    init(device: String) throws {
        var pcm: OpaquePointer?
        let rc = snd_pcm_open(&pcm, device, SND_PCM_STREAM_PLAYBACK, 0)
        guard rc >= 0, let pcm else { throw AudioError.deviceFailed(device: device, call: "open for playback", message: String(cString: snd_strerror(rc))) }
        guard snd_pcm_set_params(pcm, SND_PCM_FORMAT_S16_LE, SND_PCM_ACCESS_RW_INTERLEAVED, 2, 48000, 0, 200_000) >= 0 else {
            throw AudioError.deviceFailed(device: device, call: "snd_pcm_set_params", message: "")
        }
        var sw: OpaquePointer?
        snd_pcm_sw_params_malloc(&sw)
        snd_pcm_sw_params_current(pcm, sw)
        snd_pcm_sw_params_set_tstamp_mode(pcm, sw, SND_PCM_TSTAMP_ENABLE)
        snd_pcm_sw_params_set_tstamp_type(pcm, sw, SND_PCM_TSTAMP_TYPE_MONOTONIC)
        snd_pcm_sw_params(pcm, sw)
        snd_pcm_sw_params_free(sw)
        var bufferSize: snd_pcm_uframes_t = 0, periodSize: snd_pcm_uframes_t = 0
        snd_pcm_get_params(pcm, &bufferSize, &periodSize)
        let handle = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(pcm)))
        let frames = Int(bufferSize)
        thread = EngineThread(name: "vf-clicks") { [self] in play(OpaquePointer(bitPattern: handle)!, buffer: frames) }
    }

    private func play(_ pcm: OpaquePointer, buffer: Int) {
        var chunk = [Int16](repeating: 0, count: 480 * 2)
        var written = 0
        while !stopBox.withLock({ $0 }) {
            var clickAt: Int?
            for i in 0..<480 {
                let n = written + i
                let v: Int16 = n >= rate / 2 && n % rate < 96 ? 30000 : 0
                if v != 0 && n % rate == 0 { clickAt = n }
                chunk[2 * i] = v; chunk[2 * i + 1] = v
            }
            var rc = chunk.withUnsafeBytes { snd_pcm_writei(pcm, $0.baseAddress, 480) }
            if rc < 0 { snd_pcm_recover(pcm, Int32(rc), 1); rc = 0; underruns.withLock { $0 += 1 } }
            written += Int(rc)
            if let c = clickAt, rc == 480 {
                var avail: snd_pcm_uframes_t = 0
                var ts = timespec()
                if snd_pcm_htimestamp(pcm, &avail, &ts) == 0 {
                    // At `ts` the device had played up to `written - delay`.
                    let delay = buffer - Int(avail)
                    let playedUpTo = written - delay
                    let t = Double(ts.tv_sec) * 1e9 + Double(ts.tv_nsec) + Double(c - playedUpTo) * 1e9 / Double(rate)
                    box.withLock { $0.append(UInt64(t)) }
                }
            }
        }
        snd_pcm_drop(pcm)
        snd_pcm_close(pcm)
    }

    func stop() { stopBox.withLock { $0 = true }; thread?.join() }
}

final class PeriodTap: AudioDataOutputDelegate, @unchecked Sendable {
    let box: LockedBox<[(UInt64, UInt64, Bool)]>
    init(_ b: LockedBox<[(UInt64, UInt64, Bool)]>) { box = b }
    func audioDataOutput(_ output: AudioDataOutput, didOutput buffer: AudioSampleBuffer) {
        box.withLock { if $0.count < 50 || buffer.discontinuity { $0.append((buffer.position, buffer.timestamp.nanoseconds, buffer.discontinuity)) } }
    }
}

/// The real-time tier (inside the VM of scripts/vivid-tests.sh: vivid, snd-aloop as card 0,
/// snd-dummy as card 1). Skipped unless VIEWFINDER_SOUND_VM=1.
@Suite(.serialized, .enabled(if: ProcessInfo.processInfo.environment["VIEWFINDER_SOUND_VM"] == "1"))
struct SoundVMTests {
    let env = ProcessInfo.processInfo.environment

    /// Clicks played into the loopback while vivid video and the loopback's other end are
    /// recorded to a movie: each click must land in the movie's sound where it belongs against the
    /// video timeline. VIEWFINDER_SOUND_TOLERANCE_MS (10, or a frame with a shifted clock).
    @Test func clicksLandWhereTheyBelongInTheMovie() throws {
        let seconds = Double(env["VIEWFINDER_SOUND_SECONDS"] ?? "60") ?? 60
        let tolerance = Double(env["VIEWFINDER_SOUND_TOLERANCE_MS"] ?? "10") ?? 10
        let path = "/tmp/clicks.mov"
        try? FileManager.default.removeItem(atPath: path)
        let player = try ClickPlayer(device: "hw:Loopback,0,0")
        let camera = try CaptureDevice.open("/dev/video0", directory: .standard)
        try camera.configure { s in
            s.activeFormat = StreamRequest(pixelFormat: .yuyv, width: 320, height: 180, fps: 30)
            s.exposureMode = .locked; s.focusMode = .locked
        }
        let mic = try AudioCaptureDevice.open("hw:Loopback,1,0", request: AudioStreamRequest(sampleFormat: .s16, sampleRate: 48000, channels: 2))
        var settings = MovieOutputSettings()
        settings.maximumDuration = seconds
        let movie = MovieFileOutput(settings: settings)
        let session = CaptureSession(registry: .builtIn)
        let tap = AudioDataOutput()
        let periods = LockedBox<[(UInt64, UInt64, Bool)]>([])
        let tapper = PeriodTap(periods)
        tap.setSampleBufferDelegate(tapper, queue: nil)
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: camera))
        try session.addInput(AudioDeviceInput(device: mic))
        try session.addOutput(tap)
        try session.setSessionPreset(.inputPriority)
        try session.addOutput(movie)
        try session.commitConfiguration()
        let waiter = FinishWaiter()
        try movie.startRecording(to: path, delegate: waiter)
        try session.startRunning()
        #expect(waiter.wait(seconds: seconds + 30))
        session.stopRunning()
        player.stop()
        let stats = try #require(session.audioStatistics)
        let alignment = try #require(movie.audioAlignment)
        #expect(!stats.selfPaced)

        let samples = try movieAudioSamples(path)
        var errors: [(Double, Double)] = []   // (movie time s, error ms)
        let clicks = player.clickTimes
        var i = 1
        while i < samples.count / 2 {
            if samples[2 * i] > 15000 && samples[2 * i - 2] <= 15000 {
                let t = Double(alignment.origin) + Double(i) * 1e9 / 48000
                if let nearest = clicks.min(by: { abs(Double($0) - t) < abs(Double($1) - t) }) {
                    errors.append(((t - Double(alignment.origin)) / 1e9, (t - Double(nearest)) / 1e6))
                }
                i += 4800
            }
            i += 1
        }
        let worst = errors.map { abs($0.1) }.max() ?? .infinity
        print("sound-vm: player underruns \(player.underruns.withLock { $0 }), first periods: \(periods.withLock { $0 }.prefix(12).map { "\($0.0)@\($0.1 / 1000)us\($0.2 ? "!" : "")" })")
        print("sound-vm: \(errors.count) clicks in \(samples.count / 2) frames; software stamps \(stats.softwareTimestamps); measured \(String(format: "%+.0f", stats.measuredPPM)) ppm; overruns \(stats.overruns); aligner dropped \(alignment.dropped), repeated \(alignment.repeated), silence \(alignment.silence); worst click offset \(String(format: "%.2f", worst)) ms; a sample-counting writer would be \(String(format: "%.0f", abs(stats.measuredPPM) * 1e-6 * seconds * 1000)) ms off at the end")
        for (t, e) in errors where Int(t.rounded()) % 10 == 0 || t > seconds - 1.5 { print(String(format: "sound-vm: offset at %5.1f s: %+.2f ms", t, e)) }
        #expect(errors.count >= Int(seconds) - 3)
        #expect(worst < tolerance, "worst click offset \(worst) ms")
        if let expected = env["VIEWFINDER_SOUND_EXPECT_PPM"].flatMap(Double.init) {
            #expect(abs(abs(stats.measuredPPM) - expected) < 1000, "measured \(stats.measuredPPM) ppm, expected ±\(expected)")
        }
    }

    /// snd-dummy: a real-time card with fixed formats; what it cannot do is one clear error.
    @Test func dummyCardNegotiationAndBusyDevice() throws {
        #expect(throws: AudioError.self) {
            let s = try ALSACaptureSource(name: "hw:Dummy,0,0")
            _ = try s.configure(AudioStreamRequest(sampleFormat: .float32))
        }
        do {
            let s = try ALSACaptureSource(name: "hw:Dummy,0,0")
            #expect(throws: AudioError.unsupportedRate(device: "hw:Dummy,0,0", requested: 192000, range: s.info.minimumRate...s.info.maximumRate)) {
                _ = try s.configure(AudioStreamRequest(sampleFormat: .s16, sampleRate: 192000, channels: 2))
            }
        }
        let held = try ALSACaptureSource(name: "hw:Loopback,1,0")
        #expect(throws: AudioError.deviceBusy("hw:Loopback,1,0")) { try ALSACaptureSource(name: "hw:Loopback,1,0") }
        held.close()
        // A real-time card is not paced by the engine and its stamps are the device's.
        let source = try ALSACaptureSource(name: "hw:Dummy,0,0")
        let f = try source.configure(AudioStreamRequest(sampleFormat: .s16, sampleRate: 48000, channels: 2))
        let c = CollectingConsumer()
        let engine = AudioCaptureEngine(source: source, format: f, consumers: [c])
        let t0 = monotonicNanoseconds()
        try engine.start()
        sleep(3)
        engine.stop(); engine.waitUntilFinished()
        let wall = Double(monotonicNanoseconds() - t0) / 1e9
        let s = engine.statistics
        print("sound-vm: snd-dummy \(String(format: "%.2f", wall)) s: \(s.frames) frames, \(String(format: "%+.0f", s.measuredPPM)) ppm, overruns \(s.overruns)")
        #expect(!s.selfPaced && s.softwareTimestamps == 0)
        // Real time: never faster than the wall clock, and steady once started (the card's start
        // under emulation took up to 0.75 s); its stamps advance with its positions.
        #expect(Double(s.frames) <= wall * 48000 * 1.05 + 4800, "\(s.frames) frames in \(wall) s")
        #expect(Double(s.frames) >= (wall - 1.25) * 48000, "\(s.frames) frames in \(wall) s")
        #expect(abs(s.measuredPPM) < 2000)
    }
}
