import CALSA
import Foundation
import Testing
import ViewfinderKit

/// Plays a click every second into one end of snd-aloop (`hw:Loopback,0,0`) and notes, from the
/// playback stream's monotonic timestamps, when each click enters the cable.
///
/// One timestamp can be late: the stream's position is the one of its last update, and in the VM
/// that update can lag the time it is stamped with (seen: two clicks of 60 placed 12.6 ms and
/// 12.9 ms late, between neighbours within 0.3 ms, with the movie's sound a plain count of
/// samples, nothing dropped or repeated, so the click train in the movie is exact). So each click's
/// time comes from the line through every stamp the stream gave within a second of it (one per
/// 10 ms write), with the stamps more than 1 ms off that line left out and the line fitted again;
/// `singleStampWorst` says how far the one stamp at the click's own write was from it.
final class ClickPlayer: @unchecked Sendable {
    // @unchecked Sendable: `stamps` and `clicks` are behind `box`; the PCM is used by the player
    // thread only.
    let rate = 48000
    private struct Log {
        /// (segment, position, ns): at `ns` the stream had played up to `position`; a segment is
        /// the stretch since the last underrun.
        var stamps: [(segment: Int, position: Int, ns: Double)] = []
        /// (segment, position, ns from the click's own write alone)
        var clicks: [(segment: Int, position: Int, ns: Double)] = []
    }
    private let box = LockedBox(Log())
    private let stopBox = LockedBox(false)
    let underruns = LockedBox(0)
    private var thread: EngineThread?

    /// When each click entered the cable (ns, monotonic), from the stream's stamps around it, and
    /// from its own write's stamp alone (for the log).
    var clickTimes: [(fitted: UInt64, single: Double)] {
        let log = box.withLock { $0 }
        var times: [(UInt64, Double)] = []
        for click in log.clicks {
            var near = log.stamps.filter { $0.segment == click.segment && abs($0.position - click.position) <= rate }
            guard near.count >= 20 else { continue }
            var at = 0.0
            for _ in 0..<3 {
                // Least squares of ns against position, centred on the click.
                let n = Double(near.count)
                let xs = near.map { Double($0.position - click.position) }
                let mx = xs.reduce(0, +) / n, my = near.map(\.ns).reduce(0, +) / n
                var sxy = 0.0, sxx = 0.0
                for (x, s) in zip(xs, near) { sxy += (x - mx) * (s.ns - my); sxx += (x - mx) * (x - mx) }
                let slope = sxx > 0 ? sxy / sxx : 1e9 / Double(rate)
                at = my - slope * mx
                let kept = near.filter { abs($0.ns - (at + slope * Double($0.position - click.position))) <= 1e6 }
                if kept.count == near.count || kept.count < 20 { break }
                near = kept
            }
            times.append((UInt64(at), click.ns))
        }
        return times
    }

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
        box.withLock { $0.stamps.reserveCapacity(12_000); $0.clicks.reserveCapacity(200) }
        thread = EngineThread(name: "vf-clicks") { [self] in play(OpaquePointer(bitPattern: handle)!, buffer: frames) }
    }

    private func play(_ pcm: OpaquePointer, buffer: Int) {
        var chunk = [Int16](repeating: 0, count: 480 * 2)
        var written = 0
        var restartedAt = -rate
        while !stopBox.withLock({ $0 }) {
            var clickAt: Int?
            for i in 0..<480 {
                let n = written + i
                let v: Int16 = n >= rate / 2 && n % rate < 96 ? 30000 : 0
                if v != 0 && n % rate == 0 { clickAt = n }
                chunk[2 * i] = v; chunk[2 * i + 1] = v
            }
            var rc = chunk.withUnsafeBytes { snd_pcm_writei(pcm, $0.baseAddress, 480) }
            if rc < 0 { snd_pcm_recover(pcm, Int32(rc), 1); rc = 0; underruns.withLock { $0 += 1 }; restartedAt = written }
            written += Int(rc)
            // The reference must be right: after an underrun the stream is stopped until its
            // buffer is full again, and its timestamp is the one from before the underrun, so
            // nothing written in the second after it is used (a click then is not given a time:
            // it is not counted against the recorder).
            if rc == 480, snd_pcm_state(pcm) == SND_PCM_STATE_RUNNING, written - restartedAt > rate {
                var avail: snd_pcm_uframes_t = 0
                var ts = timespec()
                if snd_pcm_htimestamp(pcm, &avail, &ts) == 0 {
                    // At `ts` the device had played up to `written - delay`.
                    let playedUpTo = written - (buffer - Int(avail))
                    let ns = Double(ts.tv_sec) * 1e9 + Double(ts.tv_nsec)
                    let segment = restartedAt
                    box.withLock { log in
                        log.stamps.append((segment, playedUpTo, ns))
                        if let c = clickAt { log.clicks.append((segment, c, ns + Double(c - playedUpTo) * 1e9 / Double(rate))) }
                    }
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
        box.withLock { $0.append((buffer.position, buffer.timestamp.nanoseconds, buffer.discontinuity)) }
    }
}

/// A sound device whose capture thread stops reading for `stall` at the given times (seconds from
/// the first read): longer than the device's buffer, so the device really overruns, as it does when
/// the machine stalls the thread. Everything else is the device's own.
final class StallingSource: AudioCaptureSource, @unchecked Sendable {
    // @unchecked Sendable: `pending` and `t0` are used by the capture thread only.
    let inner: any AudioCaptureSource
    private var pending: [Double]
    private let stall: Double
    private var t0: UInt64 = 0
    init(_ inner: any AudioCaptureSource, at times: [Double], stall: Double) {
        self.inner = inner; pending = times.sorted(); self.stall = stall
    }
    var info: AudioDeviceInfo { inner.info }
    var periodFrames: Int { inner.periodFrames }
    func configure(_ request: AudioStreamRequest) throws -> AudioStreamFormat { try inner.configure(request) }
    func start() throws { try inner.start() }
    func close() { inner.close() }
    func read(into buffer: UnsafeMutableRawPointer, frames: Int) throws -> AudioReadResult {
        let now = monotonicNanoseconds()
        if t0 == 0 { t0 = now }
        if let next = pending.first, Double(now - t0) / 1e9 >= next {
            pending.removeFirst()
            usleep(UInt32(stall * 1e6))
        }
        return try inner.read(into: buffer, frames: frames)
    }
}

/// The real-time tier (inside the VM of scripts/vivid-tests.sh: vivid, snd-aloop as card 0,
/// snd-dummy as card 1). Skipped unless VIEWFINDER_SOUND_VM=1.
@Suite(.serialized, .enabled(if: ProcessInfo.processInfo.environment["VIEWFINDER_SOUND_VM"] == "1"))
struct SoundVMTests {
    let env = ProcessInfo.processInfo.environment

    struct ClickRun {
        var errors: [(time: Double, ms: Double)] = []
        var worst = Double.infinity
        var stats: AudioStatistics
        var playerUnderruns = 0
        /// Clicks the player gave a time while the movie was recorded.
        var timedClicks = 0
        /// The clicks that must be found: every timed one but those that fell into lost audio (a
        /// gap of g seconds holds at most ⌈g⌉ clicks: one per overrun and one per lost second) and
        /// two at the ends.
        var expectedClicks: Int { timedClicks - 2 - Int(stats.overruns) - Int((Double(stats.framesLost) / 48000).rounded(.up)) }
    }

    /// Clicks played into the loopback while vivid video and the loopback's other end are
    /// recorded to a movie; where each click landed in the movie's sound against where it belongs
    /// on the video timeline. `stalls`: times (s) at which the capture thread stops reading for
    /// `stall` seconds.
    func recordClicks(seconds: Double, stalls: [Double] = [], stall: Double = 0) throws -> ClickRun {
        let path = "/tmp/clicks.mov"
        try? FileManager.default.removeItem(atPath: path)
        let player = try ClickPlayer(device: "hw:Loopback,0,0")
        let camera = try CaptureDevice.open("/dev/video0", directory: .standard)
        try camera.configure { s in
            s.activeFormat = StreamRequest(pixelFormat: .yuyv, width: 320, height: 180, fps: 30)
            s.exposureMode = .locked; s.focusMode = .locked
        }
        let alsa = try ALSACaptureSource(name: "hw:Loopback,1,0")
        let source: any AudioCaptureSource = stalls.isEmpty ? alsa : StallingSource(alsa, at: stalls, stall: stall)
        let mic = AudioCaptureDevice(source: source, request: AudioStreamRequest(sampleFormat: .s16, sampleRate: 48000, channels: 2))
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
        var run = ClickRun(stats: stats, playerUnderruns: player.underruns.withLock { $0 })
        let timed = player.clickTimes
        let clicks = timed.map(\.fitted)
        let end = Double(alignment.origin) + Double(samples.count / 2) * 1e9 / 48000
        let inMovie = timed.filter { Double($0.fitted) >= Double(alignment.origin) && Double($0.fitted) < end }
        run.timedClicks = inMovie.count
        let singleOff = inMovie.map { abs($0.single - Double($0.fitted)) / 1e6 }
        var i = 1
        while i < samples.count / 2 {
            if samples[2 * i] > 15000 && samples[2 * i - 2] <= 15000 {
                let t = Double(alignment.origin) + Double(i) * 1e9 / 48000
                // Only clicks the player gave a time (none in the second after its own underrun).
                if let nearest = clicks.min(by: { abs(Double($0) - t) < abs(Double($1) - t) }), abs(Double(nearest) - t) < 0.5e9 {
                    run.errors.append(((t - Double(alignment.origin)) / 1e9, (t - Double(nearest)) / 1e6))
                }
                i += 4800
            }
            i += 1
        }
        run.worst = run.errors.map { abs($0.ms) }.max() ?? .infinity
        let log = periods.withLock { $0 }
        print("sound-vm: player underruns \(run.playerUnderruns), \(clicks.count) clicks played with a time (in the movie \(inMovie.count); a click's own stamp alone up to \(String(format: "%.2f", singleOff.max() ?? 0)) ms off the line through the stamps around it, \(singleOff.filter { $0 > 2 }.count) by more than 2 ms), first periods: \(log.prefix(12).map { "\($0.0)@\($0.1 / 1000)us\($0.2 ? "!" : "")" })")
        print("sound-vm: \(run.errors.count) clicks in \(samples.count / 2) frames; software stamps \(stats.softwareTimestamps); measured \(String(format: "%+.0f", stats.measuredPPM)) ppm; overruns \(stats.overruns), lost \(stats.framesLost) frames; aligner dropped \(alignment.dropped), repeated \(alignment.repeated), silence \(alignment.silence); worst click offset \(String(format: "%.2f", run.worst)) ms; a sample-counting writer would be \(String(format: "%.0f", abs(stats.measuredPPM) * 1e-6 * seconds * 1000)) ms off at the end")
        for (t, e) in run.errors where Int(t.rounded()) % 10 == 0 || t > seconds - 1.5 || abs(e) > 5 { print(String(format: "sound-vm: offset at %5.1f s: %+.2f ms", t, e)) }
        // Around each overrun: the periods' stamps against the straight line through the ones
        // before it (what the device said about the restart), for the log.
        for (k, e) in log.enumerated() where e.2 && k >= 20 {
            let (p0, t0) = (Double(log[k - 20].0), Double(log[k - 20].1))
            let (p1, t1) = (Double(log[k - 1].0), Double(log[k - 1].1))
            let slope = (t1 - t0) / (p1 - p0)
            let after = log[k..<min(log.count, k + 12)].map { String(format: "%+.1f", (Double($0.1) - (t1 + (Double($0.0) - p1) * slope)) / 1e6) }
            print(String(format: "sound-vm: overrun at %.2f s: stamps after it against the line before (ms): ", (Double(e.1) - Double(log[0].1)) / 1e9) + after.joined(separator: " "))
        }
        return run
    }

    /// Every click must land in the movie's sound where it belongs against the video timeline.
    /// VIEWFINDER_SOUND_TOLERANCE_MS (10, or a frame with a shifted clock).
    @Test func clicksLandWhereTheyBelongInTheMovie() throws {
        let seconds = Double(env["VIEWFINDER_SOUND_SECONDS"] ?? "60") ?? 60
        let tolerance = Double(env["VIEWFINDER_SOUND_TOLERANCE_MS"] ?? "10") ?? 10
        let run = try recordClicks(seconds: seconds)
        #expect(run.errors.count >= run.expectedClicks, "\(run.errors.count) of \(run.timedClicks) clicks found")
        #expect(run.timedClicks >= Int(seconds) - 2 - 2 * run.playerUnderruns)
        #expect(run.worst < tolerance, "worst click offset \(run.worst) ms")
        if let expected = env["VIEWFINDER_SOUND_EXPECT_PPM"].flatMap(Double.init) {
            #expect(abs(abs(run.stats.measuredPPM) - expected) < 1000, "measured \(run.stats.measuredPPM) ppm, expected ±\(expected)")
        }
    }

    /// The capture thread held off the device for 250 ms (three times the device's buffer) at
    /// four moments, and a storm of three 120 ms holds 0.4 s apart: the device overruns, frames
    /// are lost; what was captured after each overrun must still land where it belongs (10 ms), the
    /// loss becoming silence of its length.
    @Test func clicksStayInPlaceAcrossOverruns() throws {
        let seconds = Double(env["VIEWFINDER_SOUND_SECONDS"] ?? "60") ?? 60
        let stalls: [Double] = [0.2, 0.4, 0.6, 0.8].map { ($0 * seconds).rounded() + 0.3 }
        let storm: [Double] = [0.5 * seconds + 0.1, 0.5 * seconds + 0.5, 0.5 * seconds + 0.9]
        let run = try recordClicks(seconds: seconds, stalls: (stalls + storm).sorted(), stall: 0.25)
        #expect(run.stats.overruns >= 5, "the holds caused \(run.stats.overruns) overruns")
        #expect(run.stats.framesLost > 48000 / 10, "lost \(run.stats.framesLost) frames")
        #expect(run.errors.count >= run.expectedClicks, "\(run.errors.count) of \(run.timedClicks) clicks found")
        #expect(run.worst < 10, "worst click offset \(run.worst) ms")
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
