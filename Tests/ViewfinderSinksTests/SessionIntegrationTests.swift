import Foundation
import Testing
import Viewfinder
import ViewfinderSim
@testable import ViewfinderSinks

/// The sinks behind the capture session, fed by the sim camera (real control latency, real
/// exposure physics).
@Suite struct SessionIntegrationTests {
    func session(_ device: String, outputs: [any CaptureOutput]) throws -> (CaptureSession, CaptureDevice) {
        try simSession(device, outputs: outputs, lockLoops: true)
    }

    /// A stream that ends in the middle of a burst (a camera unplugged, a short dump) keeps the
    /// shots already taken: they are delivered, only the rest fail (2 Dec sweep: a 30-shot burst
    /// from a 20-frame stream wrote nothing).
    @Test func aBurstCutShortByTheStreamsEndKeepsItsShots() throws {
        let photo = PhotoOutput()
        // Paced (0.67 s of frames): the capture is queued long before the stream's end.
        let (session, _) = try session("sim:width=160,height=120,fps=30,frames=20", outputs: [photo])
        final class Seen: PhotoCaptureDelegate, @unchecked Sendable {
            let lock = ConditionLock()
            var photos = 0, failures = 0, done = false
            var finalError: PhotoCaptureError?
            func photoOutput(_ output: PhotoOutput, didFinishProcessingPhoto photo: CapturePhoto?, resolved: ResolvedPhotoSettings, error: PhotoCaptureError?) {
                lock.withLock { if photo != nil { photos += 1 } else { failures += 1 } }
            }
            func photoOutput(_ output: PhotoOutput, didFinishCaptureFor resolved: ResolvedPhotoSettings, error: PhotoCaptureError?) {
                lock.withLock { finalError = error; done = true; lock.broadcast() }
            }
        }
        let seen = Seen()
        try session.startRunning()
        photo.capture(settings: PhotoSettings(burstCount: 30), delegate: seen)
        session.waitUntilFinished()
        session.stopRunning()
        let deadline = monotonicNanoseconds() + 5_000_000_000
        seen.lock.withLock { while !seen.done && seen.lock.wait(untilMonotonicNanoseconds: deadline) {} }
        seen.lock.withLock {
            #expect(seen.done)
            #expect(seen.photos > 0 && seen.photos < 30, "\(seen.photos) photos")
            #expect(seen.photos + seen.failures == 30)
            #expect(seen.finalError == .sessionEnded)
        }
    }

    @Test func bracketThroughTheSimCameraControls() throws {
        let photo = PhotoOutput()
        let (session, _) = try session("sim:width=320,height=240,fps=60,exposure=8,gain=1,latency=2", outputs: [photo])
        #expect(photo.bracketer != nil)  // from the device's controls, at connection
        try session.startRunning()
        defer { session.stopRunning() }
        let photos = try photo.capturePhotos(settings: PhotoSettings(exposureBiases: [-1, 0, 1]), timeoutSeconds: 10)
        #expect(photos.count == 3)
        // Each image was taken with its exposure (time × gain relative to the base).
        let totals = photos.map { ($0.metadata.exposureTime ?? 0) * ($0.metadata.gain ?? 1) }
        #expect(totals.count == 3)
        if totals.count == 3 {
            #expect(abs(log2(totals[0] / totals[1]) + 1) < 0.1, "\(totals)")
            #expect(abs(log2(totals[2] / totals[1]) - 1) < 0.1, "\(totals)")
            // And the pictures are brighter with the exposure.
            let dec = try JPEGDecoder()
            let means = try photos.map { p -> Double in
                let d = try p.fileDataRepresentation().withUnsafeBytes { try dec.decodePlanes($0) }
                return Double(d.y.reduce(0) { $0 + Int($1) }) / Double(d.y.count)
            }
            #expect(means[0] < means[1] && means[1] < means[2], "\(means)")
        }
    }

    /// A bias the frame time cannot give in exposure is made up by the gain (2 Dec: +2 EV from
    /// 20 ms at 30 fps asked for 80 ms, the sim gave 33 ms, the gain stayed at 1: +1.74 EV got).
    @Test func aBracketBeyondTheFrameTimeTakesTheRestFromTheGain() throws {
        let photo = PhotoOutput()
        let (session, _) = try session("sim:width=320,height=240,fps=30,exposure=20,gain=1,latency=2", outputs: [photo])
        try session.startRunning()
        defer { session.stopRunning() }
        let photos = try photo.capturePhotos(settings: PhotoSettings(exposureBiases: [0, 2]), timeoutSeconds: 10)
        #expect(photos.count == 2)
        let totals = photos.map { ($0.metadata.exposureTime ?? 0) * ($0.metadata.gain ?? 1) }
        if totals.count == 2 {
            #expect(abs(log2(totals[1] / totals[0]) - 2) < 0.1, "\(photos.map { ($0.metadata.exposureTime ?? 0, $0.metadata.gain ?? 1) })")
            #expect((photos[1].metadata.exposureTime ?? .infinity) <= 1e6 / 30 + 1, "longer than a frame")
        }
    }

    @Test func movieAndDumpBehindTheSession() throws {
        let dir = makeTempDirectory()
        let movie = MovieFileOutput()
        let dump = RawDumpOutput(path: dir + "/s.vfdump")
        let (session, _) = try session("sim:width=320,height=240,fps=30,paced=false,frames=45", outputs: [movie, dump])
        let events = try recordWholeRun(session, movie, to: dir + "/s.mov")
        let (_, summary, error) = events.finished[0]
        #expect(error == nil)
        #expect(summary.frames == 45)
        #expect(dump.framesWritten == 45)
        let v = try #require(try ffprobe(dir + "/s.mov").stream("video"))
        #expect(intValue(v["nb_read_frames"]) == 45)
        // The dump replays as a device, frame for frame.
        let replay = try DumpSource(device: "dump:\(dir)/s.vfdump,paced=false")
        #expect(replay.frameCount == 45)
        try? FileManager.default.removeItem(atPath: dir)
    }
}
