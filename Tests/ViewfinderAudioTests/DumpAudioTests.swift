import Foundation
import Testing
import ViewfinderKit

/// The raw dump stores the session's sound beside its frames (version 2 audio records), and reads
/// it back: the same samples, in order, with their positions and capture times.
@Suite(.serialized) struct DumpAudioTests {
    init() { ALSAFixture.install() }

    @Test func aDumpOfSimVideoAndFileSoundReadsBackTheSameSamplesInOrderWithTimestamps() throws {
        let dir = NSTemporaryDirectory() + "vfaudio-dump-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = try DumpReplaySoundTests.makeDump(dir)

        for verify in [false, true] {
            let reader = try RawDumpReader(path: path, verify: verify)
            #expect(reader.version >= 2)   // audio records exist from version 2 on (3 adds planar frames)
            #expect(reader.frameCount > 10)
            #expect(reader.audioEntries.count > 20, "\(reader.audioEntries.count) audio records")
            var bytes: [UInt8] = []
            var previous: DumpAudioPeriod?
            var mismatches = 0
            for i in reader.audioEntries.indices {
                let start = bytes.count
                let p = try reader.readAudio(i, into: &bytes)
                #expect(p.format == AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2))
                #expect(p.position == reader.audioEntries[i].position && p.timestamp.nanoseconds == reader.audioEntries[i].timestampNanoseconds)
                // The right channel names every frame: the file's frames, in order, none missing.
                bytes[start...].withUnsafeBytes { b in
                    for k in 0..<p.frames {
                        let l = Int16(littleEndian: b.loadUnaligned(fromByteOffset: k * 4, as: Int16.self))
                        let r = Int16(littleEndian: b.loadUnaligned(fromByteOffset: k * 4 + 2, as: Int16.self))
                        let n = Int(p.position) + k
                        if l != ALSAFixture.left(n) || r != ALSAFixture.right(n) { mismatches += 1 }
                    }
                }
                if let q = previous {
                    #expect(p.position == q.position + UInt64(q.frames))
                    #expect(p.timestamp.nanoseconds > q.timestamp.nanoseconds)
                }
                previous = p
            }
            #expect(mismatches == 0)
            // The sound from before the file was open is kept: it starts at the first position the
            // microphone gave and covers the first frame.
            #expect(reader.audioEntries.first?.position == 0)
            if let a = reader.audioEntries.first, let f = reader.entries.first { #expect(a.timestampNanoseconds <= f.timestampNanoseconds) }
            // The sound spans the video's time: its stamps are on the frames' clock. The sound kept
            // from before the first frame is as long as the camera took to start after the
            // microphone (1.04 s once under TSan), so the bound is loose; another clock (realtime,
            // boot time after a suspend) would be years or minutes off.
            if let a = reader.audioEntries.first, let f = reader.entries.first {
                #expect(abs(Double(a.timestampNanoseconds) - Double(f.timestampNanoseconds)) < 5e9)
            }
        }
    }
}

/// `dump:FILE` replays the dump's sound with its frames: a movie recorded from a replay has the
/// recorded samples, in order, lasting as long as its video.
@Suite(.serialized) struct DumpReplaySoundTests {
    init() { ALSAFixture.install() }

    /// Records 1.5 s of sim video with the file PCM's sound into a dump; returns its path.
    static func makeDump(_ dir: String) throws -> String {
        let path = dir + "/a.vfdump"
        let dump = RawDumpOutput(path: path)
        let session = try simWithFileSound("sim:width=160,height=120,fps=30", outputs: [dump])
        try session.startRunning()
        usleep(1_500_000)
        session.stopRunning()
        let deadline = monotonicNanoseconds() + 10_000_000_000
        while !dump.isFinished && monotonicNanoseconds() < deadline { usleep(10_000) }
        #expect(dump.error == nil)
        return path
    }

    /// The recorded sample at the dump's first frame's time: where a movie's sound must start.
    static func firstSampleOfTheVideo(_ reader: RawDumpReader) throws -> Int {
        let firstVideo = try #require(reader.entries.first).timestampNanoseconds
        let a0 = try #require(reader.audioEntries.last { $0.timestampNanoseconds <= firstVideo } ?? reader.audioEntries.first)
        return Int(a0.position) + Int((Double(Int64(bitPattern: firstVideo &- a0.timestampNanoseconds)) * 48000 / 1e9).rounded())
    }

    /// A movie's stereo samples are the recorded ones, in order, from its first sound on, and its
    /// sample 0 is recorded sample `expectedFirst` (within a millisecond).
    static func expectTheRecordedSamples(_ samples: [Int16], startingAt expectedFirst: Int) throws {
        let first = try #require((0..<(samples.count / 2)).first { samples[2 * $0 + 1] != 0 })
        let n0 = try #require(ALSAFixture.frameNumber(at: first, in: samples), "the track from its first sound on is not the input's frames")
        #expect(abs((n0 - first) - expectedFirst) <= 48, "movie sample 0 is recorded sample \(n0 - first), expected \(expectedFirst); first sound at \(first); \(samples.count / 2) samples")
        var wrong = 0
        for k in first..<(samples.count / 2) {
            let n = n0 + (k - first)
            if samples[2 * k + 1] != ALSAFixture.right(n) || samples[2 * k] != ALSAFixture.left(n) { wrong += 1 }
        }
        #expect(wrong == 0, "\(wrong) of \(samples.count / 2) samples are not the recorded ones")
    }

    /// Replays `device` into a movie with the dump's own sound; returns the movie's samples.
    static func replay(_ device: String, to movie: String) throws -> (samples: [Int16], stats: AudioStatistics, frames: UInt64) {
        let session = CaptureSession(registry: .builtIn)
        let camera = try CaptureDevice.open(device, directory: .standard)
        let sound = try #require(try camera.recordedSound())
        #expect(sound.info.sampleFormats == [.s16] && sound.info.maximumRate == 48000)
        let output = MovieFileOutput(settings: MovieOutputSettings())
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: camera))
        try session.addInput(AudioDeviceInput(device: sound))
        try session.setSessionPreset(.inputPriority)
        var o = EngineOptions(); o.stallTimeoutSeconds = 30
        try session.setEngineOptions(o)
        try session.addOutput(output)
        try session.commitConfiguration()
        let waiter = FinishWaiter()
        try output.startRecording(to: movie, delegate: waiter)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        output.stopRecording()
        #expect(waiter.wait(seconds: 10))
        return (try movieAudioSamples(movie), try #require(session.audioStatistics), session.statistics?.delivered ?? 0)
    }

    @Test(arguments: ["paced=false", "paced=true"])
    func aMovieRecordedFromAReplayHasTheDumpsSoundInSync(_ pacing: String) throws {
        let dir = NSTemporaryDirectory() + "vfaudio-replay-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let dump = try Self.makeDump(dir)
        let reader = try RawDumpReader(path: dump)
        let firstVideo = try #require(reader.entries.first).timestampNanoseconds
        let lastVideo = try #require(reader.entries.last).timestampNanoseconds
        let expectedFirst = try Self.firstSampleOfTheVideo(reader)

        let movie = dir + "/replay.mov"
        let (samples, stats, frames) = try Self.replay("dump:\(dump),\(pacing)", to: movie)
        // Unpaced replay is not live (back-pressure): every frame. Paced replay is live: a loaded
        // machine (the sanitizer's slowdown) may drop a frame, counted; the sound stays in sync.
        let live = pacing == "paced=true"
        #expect(live ? frames > UInt64(reader.frameCount) * 9 / 10 : frames == UInt64(reader.frameCount))
        #expect(!stats.selfPaced && stats.softwareTimestamps == 0, "the dump's stamps are used: \(stats)")
        let videoSeconds = Double(lastVideo - firstVideo) / 1e9 + 1.0 / 30
        if let d = try ffprobeDurations(movie) {
            if !live { #expect(abs(d.video - videoSeconds) < 0.002, "video \(d.video) s, dump \(videoSeconds) s") }
            let lastAudio = try #require(reader.audioEntries.last)
            let soundEnd = Double(Int64(bitPattern: lastAudio.timestampNanoseconds &- firstVideo)) / 1e9 + Double(lastAudio.rawLength / 4) / 48000
            #expect(abs(d.audio - d.video) < 1.0 / 30, "audio \(d.audio) s, video \(d.video) s; the dump's sound ends at \(soundEnd) s")
        }
        // The recorded frames, in order, from where the first frame was (within a millisecond).
        try Self.expectTheRecordedSamples(samples, startingAt: expectedFirst)
    }

    /// `viewfinder export DUMP out.mov` on a dump recorded with sound: the movie has the sound
    /// (it had video only), the recorded samples in order, as long as the video, starting at the
    /// sample taken at the first frame's time.
    @Test func aMovieExportedFromADumpWithSoundHasItsSound() throws {
        let dir = NSTemporaryDirectory() + "vfaudio-export-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let dump = try Self.makeDump(dir)
        let reader = try RawDumpReader(path: dump)
        let expectedFirst = try Self.firstSampleOfTheVideo(reader)
        let movie = dir + "/export.mov"
        let r = try DumpConversion.exportMovie(dump: dump, to: movie)
        #expect(r.frames == reader.frameCount && r.skippedAudioRecords == 0)
        #expect(abs(r.audioDuration - r.duration) < 1.0 / 30, "sound \(r.audioDuration) s, video \(r.duration) s")
        if let d = try ffprobeDurations(movie) {
            #expect(abs(d.audio - d.video) < 1.0 / 30, "audio \(d.audio) s, video \(d.video) s")
        }
        try Self.expectTheRecordedSamples(try movieAudioSamples(movie), startingAt: expectedFirst)
        // A .y4m has no place for the sound: the result says how much stayed behind.
        let y = try DumpConversion.exportY4M(dump: dump, to: dir + "/export.y4m")
        #expect(y.frames == reader.frameCount && y.soundLeftBehind == reader.audioEntries.count && y.soundLeftBehind > 0)
    }

    @Test func loopsRepeatTheSoundAndADumpWithoutSoundHasNone() throws {
        let dir = NSTemporaryDirectory() + "vfaudio-loop-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let dump = try Self.makeDump(dir)
        let frames = try RawDumpReader(path: dump).frameCount
        let movie = dir + "/loop.mov"
        let (samples, stats, delivered) = try Self.replay("dump:\(dump),paced=false,loop=3", to: movie)
        #expect(delivered == UInt64(3 * frames))
        // Each pass's sound is where its frames are: pass p plays p pass lengths (the frames' span
        // and one interval) after the first — placed by the first sound record of the pass, so
        // within that record's timestamp jitter (measured 12 samples, 0.25 ms), and no drift from
        // loop to loop.
        let reader = try RawDumpReader(path: dump)
        let passFrames = Double(reader.entries.last!.timestampNanoseconds - reader.entries.first!.timestampNanoseconds + 1_000_000_000 / 30) * 48000 / 1e9
        // Pass 0 is named from its first place the fixture's frames follow on from (as each later
        // pass is, below): a recording with a skip of its own near its start (an ASan CI run
        // under load) has the same skip in every pass, so the passes' places still compare.
        let sound = try #require((0..<(samples.count / 2)).first { samples[2 * $0 + 1] != 0 })
        let first = try #require((sound..<(samples.count / 2)).first { ALSAFixture.frameNumber(at: $0, in: samples) != nil })
        let n0 = try #require(ALSAFixture.frameNumber(at: first, in: samples))
        var k = first, offsets: [Int] = []
        while offsets.count < 2 {
            // The next place where the samples stop following on from those before; a loop join
            // goes back in the recording (a skip forward is the recording's own timestamps).
            let base = k, nb = try #require(ALSAFixture.frameNumber(at: base, in: samples))
            let j = try #require((base..<(samples.count / 2)).first { samples[2 * $0 + 1] != ALSAFixture.right(nb + $0 - base) }, "no loop join after sample \(base)")
            k = try #require((j..<(samples.count / 2)).first { ALSAFixture.frameNumber(at: $0, in: samples) != nil })
            let n = try #require(ALSAFixture.frameNumber(at: k, in: samples))
            if n < nb + (j - base) { offsets.append((k - first) - (n - n0)) }
        }
        for (i, o) in offsets.enumerated() {
            #expect(abs(Double(o) - Double(i + 1) * passFrames) <= 48, "pass \(i + 1) starts \(o) samples after pass 0, expected \(Double(i + 1) * passFrames)")
        }
        if let d = try ffprobeDurations(movie) {
            #expect(abs(d.audio - d.video) < 1.0 / 30, "audio \(d.audio) s, video \(d.video) s")
        }
        #expect(stats.frames > 3 * 48000)
        // The loop joins are discontinuities on the time line, not overruns: nothing was lost.
        #expect(stats.overruns == 0)

        // A dump recorded without sound: no microphone to replay.
        let silent = dir + "/silent.vfdump"
        let session = CaptureSession(registry: .builtIn)
        let camera = try CaptureDevice.open("sim:width=64,height=64,fps=30", directory: .standard)
        let out = RawDumpOutput(path: silent)
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: camera))
        try session.setEngineOptions(EngineOptions(frameLimit: 5))
        try session.addOutput(out)
        try session.commitConfiguration()
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        while !out.isFinished { usleep(10_000) }
        #expect(try CaptureDevice.open("dump:\(silent)", directory: .standard).recordedSound() == nil)
        #expect(try CaptureDevice.open("sim", directory: .standard).recordedSound() == nil)
    }
}

@Suite struct DefaultDeviceTests {
    /// `CaptureDevice.default(for:)` gives a camera for `.video` and a microphone for `.audio`,
    /// each typed, nil (not a crash) where there is none.
    @Test func defaultDevicesByMediaType() throws {
        let camera: CaptureDevice? = CaptureDevice.default(for: .video)
        let expected = try CaptureDevice.defaultDevice(directory: .standard).uniqueID
        #expect(camera?.uniqueID == expected)
        if !FileManager.default.fileExists(atPath: "/dev/video0") { #expect(expected == "sim") }
        let mic: AudioCaptureDevice? = CaptureDevice.default(for: .audio)
        let micID = mic?.uniqueID
        mic?.source.close()   // held while open: close it before opening it again
        switch Result(catching: { try AudioCaptureDevice.defaultDevice() }) {
        case .success(let d): #expect(micID == d.uniqueID); d.source.close()
        case .failure(let e): #expect(micID == nil, "defaultDevice() threw \(e) but default(for: .audio) gave a device")
        }
    }
}
