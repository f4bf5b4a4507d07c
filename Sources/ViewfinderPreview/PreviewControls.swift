import Foundation
import Hummingbird
import Logging
import ViewfinderKit

/// `POST /api/point`: a tap on the picture, normalised to the picture as the user sees it
/// (0,0 top-left … 1,1 bottom-right).
struct PointRequest: Decodable, Sendable {
    var x: Double
    var y: Double
    /// Set the exposure point of interest (default true).
    var exposure: Bool?
    /// Set the focus point of interest (default true).
    var focus: Bool?
}

/// `POST /api/record`: start (`true`) or stop (`false`) recording.
struct RecordRequest: Decodable, Sendable {
    var recording: Bool
}

/// `POST /api/stage`: switch one of the session's stages on or off.
struct StageRequest: Decodable, Sendable {
    var name: String
    var enabled: Bool
}

/// A body-less control (`{}`).
/// A body that takes no fields: an object (`{}`, or no body at all), not any JSON (`[]`, `3`).
/// Fields it does not know are passed over, as the other requests pass theirs over.
struct EmptyRequest: Decodable, Sendable {
    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
    init(from decoder: any Decoder) throws {
        _ = try decoder.container(keyedBy: AnyKey.self)
    }
}

struct PointReply: Encodable, Sendable {
    var x: Double, y: Double
    var exposure: Bool, focus: Bool
    var exposureMode: String, focusMode: String
}

struct FileReply: Encodable, Sendable {
    /// The file's name inside the output folder.
    var file: String
    var bytes: Int?
    var recording: Bool?
}

struct StageReply: Encodable, Sendable {
    var stages: [StageState]
}

struct StageState: Codable, Sendable, Equatable {
    var name: String
    var enabled: Bool
}

/// Carries out the page's controls on the session, validating every input first. Paths never
/// come from a request: files are named here, in the configured folder.
final class PreviewControls: Sendable {
    let session: CaptureSession
    let device: CaptureDevice
    let photo: PhotoOutput
    let movie: MovieFileOutput
    let folder: String
    let logger: Logger
    private let counter = LockedBox(0)
    private let recordingFile = LockedBox<String?>(nil)
    /// How the last recording started from the page ended when it ended on its own with an error
    /// (a full disk): said on standard error, in `/api/state` and on the page.
    private let recordingEnd = LockedBox<String?>(nil)
    var lastRecordingError: String? { recordingEnd.withLock { $0 } }

    /// Hears how a recording ends.
    private final class RecordingWatcher: MovieRecordingDelegate, Sendable {
        let controls: PreviewControls
        init(_ c: PreviewControls) { controls = c }
        func movieOutput(_ output: MovieFileOutput, didFinishRecordingTo path: String, summary: MovieRecordingSummary, error: MovieRecordingError?) {
            controls.recordingEnded(path: path, summary: summary, error: error)
        }
    }

    func recordingEnded(path: String, summary: MovieRecordingSummary, error: MovieRecordingError?) {
        guard let error else { return }
        // Called on the movie's thread after it let go of the file: a recording started from the
        // page meanwhile is not this one, and keeps its name and state.
        let name = PathName.lastComponent(path)
        let current = recordingFile.withLock { f -> Bool in
            guard f == nil || f == name else { return false }
            f = nil
            return true
        }
        var message = "recording \(name) ended: \(error)"
        if summary.frames == 0 {
            // Nothing of it is a movie (a header at most): it is not left to look like one.
            try? FileManager.default.removeItem(atPath: path)
            message += " (no frame was written; the file was removed)"
        } else {
            message += String(format: " (%d frames, %.2f s kept)", summary.frames, summary.duration)
        }
        logger.error("preview: \(message)")
        if current { recordingEnd.withLock { $0 = message } }
    }

    init(session: CaptureSession, device: CaptureDevice, photo: PhotoOutput, movie: MovieFileOutput, folder: String, logger: Logger) {
        self.session = session
        self.device = device
        self.photo = photo
        self.movie = movie
        self.folder = folder
        self.logger = logger
    }

    /// Sets the exposure and/or focus point of interest (user-facing coordinates; the session
    /// maps them through the connection's rotation and mirroring), switching the modes to
    /// continuous where they were locked and the device supports it.
    func setPoint(_ r: PointRequest) throws -> PointReply {
        guard r.x.isFinite, r.y.isFinite, (0...1).contains(r.x), (0...1).contains(r.y) else {
            throw HTTPError(.badRequest, message: "x and y must be numbers in 0…1 (got \(r.x), \(r.y))")
        }
        let doExposure = r.exposure ?? true, doFocus = r.focus ?? true
        guard doExposure || doFocus else { throw HTTPError(.badRequest, message: "nothing to set: exposure and focus are both false") }
        let p = NormalizedPoint(x: r.x, y: r.y)
        // A pipeline that runs its own exposure (or focus) stage meters by that stage's options:
        // the device's mode switched to continuous beside it would be a second loop fighting it
        // (2 Dec sweep: exposure hunted between 10 and 33 ms after a tap). The tap leaves that
        // kind alone and says so.
        let running = Set(session.stages.filter(\.enabled).map(\.name))
        let pipelineExposes = running.contains("exposure"), pipelineFocuses = running.contains("focus")
        let canExpose = device.isExposurePointOfInterestSupported && !pipelineExposes
        let canFocus = device.isFocusPointOfInterestSupported && !pipelineFocuses
        if (!doExposure || !canExpose) && (!doFocus || !canFocus) {
            let owned = [pipelineExposes && doExposure ? "exposure" : nil, pipelineFocuses && doFocus ? "focus" : nil].compactMap { $0 }
            if !owned.isEmpty {
                throw HTTPError(.conflict, message: "the pipeline's own \(owned.joined(separator: " and ")) stage meters by its options; switch it off to point by tapping")
            }
            throw HTTPError(.conflict, message: "device '\(device.uniqueID)' has no exposure or focus control to point")
        }
        do {
            try device.configure { s in
                if doExposure && canExpose {
                    s.exposurePointOfInterest = p
                    if s.exposureMode == .locked || s.exposureMode == .custom { s.exposureMode = .continuous }
                }
                if doFocus && canFocus {
                    s.focusPointOfInterest = p
                    if s.focusMode == .locked { s.focusMode = .continuous }
                }
            }
        } catch {
            throw HTTPError(.conflict, message: "\(error)")
        }
        let s = device.settings
        return PointReply(x: r.x, y: r.y, exposure: doExposure && canExpose, focus: doFocus && canFocus,
                          exposureMode: s.exposureMode.rawValue, focusMode: s.focusMode.rawValue)
    }

    /// A file name in the output folder: `prefix-YYYYMMDD-HHMMSS-N.ext`, N counting up within
    /// this server so two requests in one second never collide (existing files are skipped).
    func newFile(prefix: String, ext: String) -> (name: String, path: String) {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyyMMdd-HHmmss"
        let stamp = f.string(from: Date())
        while true {
            let n = counter.withLock { c -> Int in c += 1; return c }
            let name = "\(prefix)-\(stamp)-\(n).\(ext)"
            let path = PathName.appending(name, to: folder)
            if !FileManager.default.fileExists(atPath: path) { return (name, path) }
        }
    }

    /// Takes one JPEG still and writes it into the output folder.
    func takeStill() async throws -> FileReply {
        guard session.isRunning else { throw HTTPError(.conflict, message: "the session is not running") }
        let photo = self.photo
        // capturePhotos blocks until the photo is made (a frame or two): off the server's threads.
        let photos: [CapturePhoto] = try await withCheckedThrowingContinuation { c in
            DispatchQueue.global().async {
                do { c.resume(returning: try photo.capturePhotos(settings: PhotoSettings(), timeoutSeconds: 10)) } catch { c.resume(throwing: error) }
            }
        }
        guard let p = photos.first else { throw HTTPError(.internalServerError, message: "the photo output returned no photo") }
        let (name, path) = newFile(prefix: "still", ext: "jpg")
        do { try p.write(to: path, overwrite: false) } catch {
            throw HTTPError(.internalServerError, message: "writing the still failed: \(error)")
        }
        logger.info("preview: still \(path)")
        return FileReply(file: name, bytes: p.fileDataRepresentation().count, recording: nil)
    }

    /// Starts or stops the movie recording. Stopping answers once the file is finished (a
    /// recording ends on the output's thread after the frames already captured), with its size
    /// on disk; at most 10 s are waited for.
    func record(_ r: RecordRequest) async throws -> FileReply {
        if r.recording {
            guard session.isRunning else { throw HTTPError(.conflict, message: "the session is not running") }
            if let current = recordingFile.withLock({ $0 }), movie.isRecording {
                throw HTTPError(.conflict, message: "already recording to \(current)")
            }
            let (name, path) = newFile(prefix: "movie", ext: "mov")
            recordingEnd.withLock { $0 = nil }
            do { try movie.startRecording(to: path, overwrite: false, delegate: RecordingWatcher(self)) } catch {
                throw HTTPError(.conflict, message: "recording could not start: \(error)")
            }
            recordingFile.withLock { $0 = name }
            logger.info("preview: recording to \(path)")
            return FileReply(file: name, bytes: nil, recording: true)
        } else {
            guard movie.isRecording, let name = recordingFile.withLock({ $0 }) else {
                throw HTTPError(.conflict, message: "not recording")
            }
            movie.stopRecording()
            recordingFile.withLock { $0 = nil }
            let deadline = monotonicNanoseconds() + 10_000_000_000
            while movie.isRecording && monotonicNanoseconds() < deadline { try? await Task.sleep(nanoseconds: 10_000_000) }
            let onDisk = (try? FileManager.default.attributesOfItem(atPath: PathName.appending(name, to: folder))[.size] as? Int) ?? nil
            return FileReply(file: name, bytes: onDisk ?? Int(movie.recordedFileSize), recording: false)
        }
    }

    /// The recording's file name while recording.
    var currentRecording: String? { movie.isRecording ? recordingFile.withLock { $0 } : nil }

    /// The session's stages and whether each runs.
    var stages: [StageState] { session.stages.map { StageState(name: $0.name, enabled: $0.enabled) } }

    /// Switches a stage of the session on or off (the session rebuilds its chain).
    func setStage(_ r: StageRequest) throws -> StageReply {
        var specs = session.stages
        guard let i = specs.firstIndex(where: { $0.name == r.name }) else {
            let known = specs.map(\.name)
            throw HTTPError(.badRequest, message: "unknown stage '\(r.name)' (this session's stages: \(known.isEmpty ? "none" : known.joined(separator: ", ")))")
        }
        if specs[i].enabled != r.enabled {
            // A change restarts the session's engine, which ends a recording: refuse it while one
            // runs instead of cutting the movie short behind the user's back.
            if movie.isRecording || recordingFile.withLock({ $0 }) != nil {
                let file = recordingFile.withLock { $0 } ?? "a movie"
                throw HTTPError(.conflict, message: "recording to \(file): switching a stage restarts the session and would end the recording; stop recording first")
            }
            specs[i].enabled = r.enabled
            // A pipeline exposure or focus stage switched on takes its kind from the device's own
            // loop (a tap may have started it while the stage was off): the session runs one loop
            // per kind, and the device's resumes when the stage is switched off again.
            do { try session.setStages(specs) } catch {
                throw HTTPError(.conflict, message: "the session refused the change: \(error)")
            }
        }
        return StageReply(stages: stages)
    }
}
