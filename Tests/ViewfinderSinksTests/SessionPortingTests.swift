import Foundation
import Synchronization
import Testing
@testable import Viewfinder
import ViewfinderSim
@testable import ViewfinderSinks

/// What an app ported from AVFoundation does with a session's connections, outputs and device,
/// found by porting the seeds' examples (29 Nov): each case here behaved otherwise before.
@Suite struct SessionPortingTests {
    func session(_ device: String, outputs: [any CaptureOutput]) throws -> (CaptureSession, CaptureDevice) {
        try simSession(device, outputs: outputs)
    }

    /// A connection set up by the app (rotation, mirroring, enabled) stays the same object with
    /// the same settings when the session's configuration changes around it; it was rebuilt by
    /// every commit, the settings lost and the app's reference stale.
    @Test func connectionsKeepTheirSettingsAcrossConfigurationChanges() throws {
        let photo = PhotoOutput()
        let (session, _) = try session("sim:width=320,height=240", outputs: [photo])
        let connection = try #require(session.connections.first { $0.output === photo })
        try connection.setVideoRotationAngle(90)
        connection.isVideoMirrored = true
        let movie = MovieFileOutput()
        try session.addOutput(movie)
        #expect(session.connections.count == 2)
        let after = try #require(session.connections.first { $0.output === photo })
        #expect(after === connection)
        #expect(after.videoRotationAngle == 90 && after.isVideoMirrored)
        #expect(photo.connectionOrientation == .leftMirrored)
        // Removing the other output leaves it too; removing its own output ends it.
        session.removeOutput(movie)
        #expect(session.connections.count == 1 && session.connections.first === connection)
        session.removeOutput(photo)
        #expect(session.connections.isEmpty)
        try session.addOutput(photo)
        let fresh = try #require(session.connections.first)
        #expect(fresh !== connection && fresh.videoRotationAngle == 0)
    }

    /// The movie output takes its connection's rotation into the track matrix (seed 000 sets the
    /// movie connection's orientation); it wrote 0 whatever the connection said.
    @Test func theMovieTakesItsConnectionsRotation() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let movie = MovieFileOutput()
        let (session, _) = try session("sim:width=320,height=240,fps=30,paced=false,frames=10", outputs: [movie])
        try #require(session.connections.first { $0.output === movie && $0.mediaType == .video }).setVideoRotationAngle(90)
        _ = try recordWholeRun(session, movie, to: dir + "/r.mov")
        let (_, out, _) = try run("/usr/bin/ffprobe", ["-v", "error", "-select_streams", "v", "-show_entries", "stream_side_data=rotation", "-of", "csv=p=0", dir + "/r.mov"])
        let reported = Int(Double(out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0)
        #expect((360 - reported) % 360 == 90, "ffprobe rotation '\(out)'")
    }

    /// A movie output used again: each run's microphone gives the audio track its format, a run
    /// without one gives no audio track; an audio format the app set stays. (The first run's
    /// format stuck, and the later runs' sound was dropped as not matching it.)
    @Test func eachRunsMicrophoneSetsTheMoviesAudioFormat() throws {
        let movie = MovieFileOutput()
        movie.prepareAudio(format: AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2))
        #expect(movie.settings.audio == PCMFormat(sampleRate: 48000, channels: 2))
        movie.finishAudio(error: nil)
        #expect(movie.settings.audio == nil)
        movie.prepareAudio(format: AudioStreamFormat(sampleFormat: .s16, sampleRate: 16000, channels: 1))
        #expect(movie.settings.audio == PCMFormat(sampleRate: 16000, channels: 1))
        movie.finishAudio(error: nil)
        #expect(movie.settings.audio == nil)
        // The app's own format is kept, run after run.
        var s = movie.settings
        s.audio = PCMFormat(sampleRate: 44100, channels: 1)
        movie.settings = s
        movie.prepareAudio(format: AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2))
        movie.finishAudio(error: nil)
        #expect(movie.settings.audio == PCMFormat(sampleRate: 44100, channels: 1))
    }

    /// `exposureMode = .custom` through the lock keeps the exposure in use now, as AVFoundation's
    /// (it was staged with no duration and no gain, which `configure` refuses).
    @Test func customExposureThroughTheLockKeepsTheCurrentExposure() throws {
        let device = try CaptureDevice.open("sim:width=320,height=240,exposure=8,gain=2", directory: .core)
        try device.lockForConfiguration()
        try device.setExposureMode(.custom)
        device.unlockForConfiguration()
        #expect(device.settings.exposureMode == .custom)
        let d = try #require(device.settings.customExposureDuration)
        let g = try #require(device.settings.customGain)
        #expect(abs(d - 8000) < 100, "\(d) µs")
        #expect(abs(g - 2) < 0.01, "gain \(g)")
        // The range a slider for it needs (seed 000): the control's, in µs.
        let range = try #require(device.controls?.descriptor(.exposureTime))
        #expect(device.minExposureDurationMicroseconds == Double(max(1, range.minimum)) * 100)
        #expect(device.maxExposureDurationMicroseconds == Double(range.maximum) * 100)
        #expect(device.minExposureDurationMicroseconds! < d && d < device.maxExposureDurationMicroseconds!)
        let pattern = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32"))
        #expect(pattern.minExposureDurationMicroseconds == nil && pattern.maxExposureDurationMicroseconds == nil)
    }

    /// An asset writer makes QuickTime movies: a path named otherwise is refused at
    /// `startWriting` (an `.mp4` got a QuickTime file under its name).
    @Test func anAssetWriterRefusesAFileTypeItDoesNotWrite() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let writer = AssetWriter(path: dir + "/out.mp4")
        try writer.add(AssetWriterInput(settings: .video(width: 64, height: 48)))
        #expect(throws: AssetWriterError.unsupportedFileType(path: dir + "/out.mp4")) { try writer.startWriting() }
        #expect(!FileManager.default.fileExists(atPath: dir + "/out.mp4"))
        let ok = AssetWriter(path: dir + "/out.MOV")
        try ok.add(AssetWriterInput(settings: .video(width: 64, height: 48)))
        try ok.startWriting()
        ok.cancelWriting()
    }

    /// `startRunning()` between `beginConfiguration()` and `commitConfiguration()` says so (it
    /// said "the session has no video input" with one staged), as AVFoundation refuses it.
    @Test func startingInsideABatchSaysTheBatchIsOpen() throws {
        let session = CaptureSession()
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: try CaptureDevice.open("sim:width=320,height=240", directory: .core)))
        try session.addOutput(VideoDataOutput())
        #expect(throws: SessionError.invalidConfiguration(reason: "startRunning() inside a configuration batch: call commitConfiguration() first")) {
            try session.startRunning()
        }
        try session.commitConfiguration()
        try session.startRunning()
        session.stopRunning()
    }

    /// An output is in one session at a time (it could be added to two, and its delegate got both
    /// streams interleaved); removed from the first, or the first gone, it may join another.
    @Test func anOutputIsInOneSessionAtATime() throws {
        let video = VideoDataOutput()
        let (first, _) = try session("sim:width=320,height=240", outputs: [video])
        let second = CaptureSession()
        #expect(!second.canAddOutput(video))
        #expect(throws: SessionError.cannotAddOutput(reason: "it is in another session (remove it there first)")) { try second.addOutput(video) }
        first.removeOutput(video)
        #expect(second.canAddOutput(video))
        try second.addOutput(video)
        #expect(!first.canAddOutput(video))
        // A session that goes frees its outputs.
        var third: CaptureSession? = CaptureSession()
        let photo = PhotoOutput()
        try third!.addOutput(photo)
        #expect(!second.canAddOutput(photo))
        third = nil
        #expect(second.canAddOutput(photo))
        try second.addOutput(photo)
        _ = third
    }

    /// What `print(output.droppedFrames)` shows (it printed the type's name), and AVFoundation's
    /// name for a video data output's delegate.
    @Test func dropCountersDescribeThemselvesAndTheDelegateHasAVFoundationsName() {
        let d = DropCounters()
        #expect(d.description == "none dropped")
        d.count(.late, 2)
        d.count(.ringFull)
        #expect("\(d)" == "3 dropped (late 2, ring_full 1)")
        final class Sink: VideoDataOutputDelegate, @unchecked Sendable {
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {}
        }
        let video = VideoDataOutput()
        video.setSampleBufferDelegate(Sink(), queue: nil)
    }

    /// `stopRunning()` from a video delegate without a queue (on the engine's own thread) stops
    /// and returns; it waited for its own thread for ever, and every later `stopRunning()` with it
    /// (a library user's sweep, 2 Dec). The session then starts and stops again as usual.
    @Test func stopRunningFromADelegateOnTheEnginesThreadReturns() throws {
        final class Stopper: VideoDataOutputDelegate, @unchecked Sendable {
            weak var session: CaptureSession?
            let returned = LockedBox(0)
            let frames = LockedBox(0)
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
                let n = frames.withLock { $0 += 1; return $0 }
                if n == 3 { session?.stopRunning(); returned.withLock { $0 += 1 } }
            }
        }
        let video = VideoDataOutput()
        let stopper = Stopper()
        video.setDelegate(stopper, queue: nil)
        let (session, _) = try session("sim:width=320,height=240,fps=60", outputs: [video])
        stopper.session = session
        for run in 1...2 {
            stopper.frames.withLock { $0 = 0 }
            try session.startRunning()
            let deadline = monotonicNanoseconds() + 20_000_000_000
            while stopper.returned.withLock({ $0 }) < run && monotonicNanoseconds() < deadline { usleep(10_000) }
            #expect(stopper.returned.withLock { $0 } == run, "stopRunning() inside the delegate did not return")
            session.waitUntilFinished()
            #expect(!session.isRunning)
            session.stopRunning()   // from the test's thread: returns too
        }
    }

    /// `stopRunning()` then `startRunning()` from a delegate without a queue (a restart from the
    /// engine's own thread): the new run starts once the old one's outputs are done. It started at
    /// once, and the new run fed the same delegate from a second thread while the old call was
    /// still in it (the diff's reading, 2 Dec).
    @Test func aRestartFromADelegateOnTheEnginesThreadStartsAfterTheOldRun() throws {
        final class Restarter: VideoDataOutputDelegate, @unchecked Sendable {
            weak var session: CaptureSession?
            let inside = Atomic<Int>(0)
            let overlaps = LockedBox(0)
            let frames = LockedBox(0)
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
                if inside.add(1, ordering: .sequentiallyConsistent).newValue > 1 { overlaps.withLock { $0 += 1 } }
                defer { inside.subtract(1, ordering: .sequentiallyConsistent) }
                let n = frames.withLock { $0 += 1; return $0 }
                if n == 3 {
                    session?.stopRunning()
                    do { try session?.startRunning() } catch { Issue.record("startRunning() threw \(error)") }
                    usleep(200_000)   // still in the old run's call: the new run must not be here yet
                }
            }
        }
        let video = VideoDataOutput()
        let restarter = Restarter()
        video.setDelegate(restarter, queue: nil)
        // 30 frames a run: the restarted run ends by itself, and waitUntilFinished() waits for it.
        let (session, _) = try session("sim:width=320,height=240,fps=60,frames=30", outputs: [video])
        restarter.session = session
        let events = LockedBox<[String]>([])
        session.onEvent { e in events.withLock { $0.append("\(e)") } }
        try session.startRunning()
        session.waitUntilFinished()   // the restarted run's end, not the first run's
        #expect(!session.isRunning)
        session.stopRunning()
        session.deliverPendingEvents()
        #expect(restarter.frames.withLock { $0 } >= 20, "the restarted run delivered its frames")
        #expect(restarter.overlaps.withLock { $0 } == 0, "two runs fed the delegate at once")
        let seen = events.withLock { $0 }
        #expect(seen == ["did start running", "did stop running", "did start running", "did stop running"], "\(seen)")
    }

    /// The camera's input removed while running ends the run and is gone; it stayed (the change
    /// was refused silently, the engine restarted around it; a library user's sweep, 2 Dec). An
    /// input added again runs again.
    @Test func removingTheCamerasInputWhileRunningEndsTheRun() throws {
        let video = VideoDataOutput()
        let (session, _) = try session("sim:width=320,height=240,fps=30", outputs: [video])
        let events = LockedBox<[String]>([])
        session.onEvent { e in events.withLock { $0.append("\(e)") } }
        try session.startRunning()
        let input = try #require(session.inputs.first)
        session.removeInput(input)
        session.deliverPendingEvents()
        #expect(session.inputs.isEmpty)
        #expect(!session.isRunning)
        #expect(events.withLock { $0 }.last?.contains("stop") == true, "\(events.withLock { $0 })")
        #expect(throws: SessionError.noVideoInput) { try session.startRunning() }
        try session.addInput(input)
        try session.startRunning()
        #expect(session.isRunning)
        session.stopRunning()
    }

    /// A custom exposure the device cannot take is refused at the call; it was accepted, then
    /// refused when applied, and the batch's other changes (zoom, lens) were dropped with it while
    /// `settings` said they were in use (a library user's sweep, 2 Dec).
    @Test func aCustomExposureOutOfRangeIsRefusedAtTheCall() throws {
        let device = try CaptureDevice.open("sim:width=320,height=240", directory: .core)
        let maxDuration = try #require(device.maxExposureDurationMicroseconds)
        try device.lockForConfiguration()
        #expect(throws: SessionError.self) { try device.setExposureModeCustom(durationMicroseconds: maxDuration * 5, iso: 200) }
        #expect(throws: SessionError.self) { try device.setExposureModeCustom(durationMicroseconds: 10_000_000, iso: 200) }
        #expect(throws: SessionError.self) { try device.setExposureModeCustom(durationMicroseconds: 1_000, gain: 1000) }
        device.unlockForConfiguration()
        #expect(device.settings.exposureMode != .custom)
        try device.lockForConfiguration()
        try device.setExposureModeCustom(durationMicroseconds: min(maxDuration, 20_000), iso: 200)
        device.unlockForConfiguration()
        #expect(device.settings.exposureMode == .custom)
    }

    /// `setExposureMode(.custom)` after a custom spell and a return to auto keeps the exposure in
    /// use now, not the old custom values (which it brought back).
    @Test func customAgainKeepsTheCurrentExposureNotTheOldCustomOne() throws {
        let device = try CaptureDevice.open("sim:width=320,height=240,exposure=8,gain=2", directory: .core)
        try device.lockForConfiguration()
        try device.setExposureModeCustom(durationMicroseconds: 1_000, iso: 100)
        device.unlockForConfiguration()
        try device.lockForConfiguration()
        try device.setExposureMode(.continuous)
        device.unlockForConfiguration()
        try device.lockForConfiguration()
        try device.setExposureMode(.custom)
        device.unlockForConfiguration()
        // Not running: what is in use is the controls' (8 ms, gain 2), not the old 1 ms.
        #expect(device.settings.customExposureDuration == 8_000)
        #expect(device.settings.customGain == 2)
    }

    /// A recording asked for between two runs waits for the next; stopped before it, it is
    /// withdrawn at once: `didFinish` with 0 frames, no file, not recording (it stayed
    /// "recording" and blocked every later start with `alreadyRecording`).
    @Test func aWaitingRecordingCanBeWithdrawn() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let movie = MovieFileOutput()
        let (session, _) = try session("sim:width=320,height=240,fps=30,paced=false,frames=5", outputs: [movie])
        _ = try recordWholeRun(session, movie, to: dir + "/first.mov")
        let events = RecordingEvents()
        try movie.startRecording(to: dir + "/waiting.mov", delegate: events)
        #expect(movie.isRecording)
        movie.stopRecording()
        #expect(events.waitFinished(timeout: 1))
        #expect(!movie.isRecording)
        #expect(events.finished.first?.1.frames == 0 && events.finished.first?.1.reason == .stopped)
        #expect(!FileManager.default.fileExists(atPath: dir + "/waiting.mov"))
        _ = try recordWholeRun(session, movie, to: dir + "/second.mov")
    }

    /// A session that goes while running leaves its outputs to the next session at once (the deinit
    /// waits for its engine), and a session's end still under way on another thread keeps them.
    @Test func aSessionsOutputsAreFreeWhenItHasGone() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let movie = MovieFileOutput()
        let events = RecordingEvents()
        try {
            let (s, _) = try session("sim:width=320,height=240,fps=30", outputs: [movie])
            try movie.startRecording(to: dir + "/first.mov", delegate: events)
            try s.startRunning()
            usleep(300_000)
        }()
        // The first session's movie is complete when its deinit returns.
        #expect(events.finished.count == 1 && events.finished.first?.2 == nil)
        let (next, _) = try session("sim:width=320,height=240,fps=30,paced=false,frames=5", outputs: [movie])
        _ = try recordWholeRun(next, movie, to: dir + "/second.mov")
        let token = OutputClaims.hold([movie])
        #expect(!CaptureSession().canAddOutput(movie))
        OutputClaims.release(token)
        next.removeOutput(movie)
        #expect(CaptureSession().canAddOutput(movie))
    }
}
