/// The kind of media an input provides and an output accepts.
public enum MediaType: String, Sendable, Codable, CaseIterable {
    case video, audio
}

/// A link between an input's port and an output, formed automatically by the session when their
/// media types match (AVFoundation's `AVCaptureConnection`).
///
/// Orientation and mirroring describe how the picture is shown to the user: rotation is applied
/// clockwise to the sensor image, then mirroring flips it left-right. Points of interest are given
/// in that user-facing picture and mapped back to the sensor here — see ``sensorPoint(fromUserPoint:)``.
public final class CaptureConnection: @unchecked Sendable {
    // @unchecked Sendable: mutable settings are guarded by `state`.
    public let mediaType: MediaType
    public unowned let input: CaptureInput
    public unowned let output: any CaptureOutput
    private let state = LockedBox(Settings())

    struct Settings { var enabled = true; var rotation = 0; var mirrored = false }

    init(mediaType: MediaType, input: CaptureInput, output: any CaptureOutput) {
        self.mediaType = mediaType
        self.input = input
        self.output = output
    }

    /// A disabled connection delivers nothing to its output.
    public var isEnabled: Bool {
        get { state.withLock { $0.enabled } }
        set { state.withLock { $0.enabled = newValue } }
    }

    /// Clockwise rotation of the picture as shown, degrees: 0, 90, 180 or 270.
    public var videoRotationAngle: Int { state.withLock { $0.rotation } }

    public func isVideoRotationAngleSupported(_ angle: Int) -> Bool { [0, 90, 180, 270].contains(angle) }

    /// Sets the rotation; any angle other than 0, 90, 180, 270 is an error.
    public func setVideoRotationAngle(_ angle: Int) throws {
        guard isVideoRotationAngleSupported(angle) else { throw SessionError.unsupportedRotation(angle) }
        state.withLock { $0.rotation = angle }
    }

    /// Whether the picture is mirrored left-right (after rotation), as a front camera preview is.
    public var isVideoMirrored: Bool {
        get { state.withLock { $0.mirrored } }
        set { state.withLock { $0.mirrored = newValue } }
    }

    /// Maps a point of the picture as the user sees it (0,0 top-left, 1,1 bottom-right, after
    /// rotation and mirroring) to the sensor's own coordinates, which is what metering and focus
    /// regions use.
    public func sensorPoint(fromUserPoint p: NormalizedPoint) -> NormalizedPoint {
        let s = state.withLock { $0 }
        return CaptureConnection.sensorPoint(fromUserPoint: p, rotation: s.rotation, mirrored: s.mirrored)
    }

    /// Maps a sensor point to where the user sees it.
    public func userPoint(fromSensorPoint p: NormalizedPoint) -> NormalizedPoint {
        let s = state.withLock { $0 }
        return CaptureConnection.userPoint(fromSensorPoint: p, rotation: s.rotation, mirrored: s.mirrored)
    }

    public static func userPoint(fromSensorPoint p: NormalizedPoint, rotation: Int, mirrored: Bool) -> NormalizedPoint {
        var q: NormalizedPoint
        switch ((rotation % 360) + 360) % 360 {
        case 90: q = NormalizedPoint(x: 1 - p.y, y: p.x)    // clockwise quarter turn
        case 180: q = NormalizedPoint(x: 1 - p.x, y: 1 - p.y)
        case 270: q = NormalizedPoint(x: p.y, y: 1 - p.x)
        default: q = p
        }
        if mirrored { q.x = 1 - q.x }
        return q
    }

    public static func sensorPoint(fromUserPoint p: NormalizedPoint, rotation: Int, mirrored: Bool) -> NormalizedPoint {
        var q = p
        if mirrored { q.x = 1 - q.x }
        switch ((rotation % 360) + 360) % 360 {
        case 90: return NormalizedPoint(x: q.y, y: 1 - q.x)
        case 180: return NormalizedPoint(x: 1 - q.x, y: 1 - q.y)
        case 270: return NormalizedPoint(x: 1 - q.y, y: q.x)
        default: return q
        }
    }

    /// EXIF orientation (1–8) that shows the sensor picture as the user sees it.
    public var exifOrientation: Int {
        let s = state.withLock { $0 }
        switch (s.rotation, s.mirrored) {
        case (0, false): return 1
        case (0, true): return 2
        case (180, false): return 3
        case (180, true): return 4
        case (90, true): return 5
        case (90, false): return 6
        case (270, true): return 7
        case (270, false): return 8
        default: return 1
        }
    }
}

/// Something a session takes media from (AVFoundation's `AVCaptureInput`).
open class CaptureInput: @unchecked Sendable {
    // @unchecked Sendable: subclasses keep their mutable state behind locks.
    public let mediaType: MediaType
    public init(mediaType: MediaType) { self.mediaType = mediaType }
}

/// Something a session delivers media to: a video data output, a photo output, a movie file output.
///
/// An output is a ``FrameConsumer``: the engine gives it its own ring and thread.
public protocol CaptureOutput: FrameConsumer {
    /// The media types this output takes.
    var acceptedMediaTypes: Set<MediaType> { get }
    /// Called by the session when it connects or disconnects the output.
    func sessionDidConnect(_ connection: CaptureConnection)
    func sessionDidDisconnect(_ connection: CaptureConnection)
}

extension CaptureOutput {
    public func sessionDidConnect(_ connection: CaptureConnection) {}
    public func sessionDidDisconnect(_ connection: CaptureConnection) {}
}

/// Errors from the capture session. Each names what is wrong.
public enum SessionError: Error, Equatable, CustomStringConvertible {
    case cannotAddInput(reason: String)
    case cannotAddOutput(reason: String)
    case presetUnsupported(preset: String, device: String, available: [String])
    case noVideoInput
    case notInConfiguration
    case notLockedForConfiguration(device: String)
    case lockedByAnotherClient(device: String)
    case unsupportedMode(device: String, mode: String, reason: String)
    case unsupportedRotation(Int)
    case invalidConfiguration(reason: String)
    case alreadyRunning

    public var description: String {
        switch self {
        case .cannotAddInput(let r): return "cannot add input: \(r)"
        case .cannotAddOutput(let r): return "cannot add output: \(r)"
        case .presetUnsupported(let p, let d, let a):
            return "device '\(d)' cannot do preset '\(p)' (its sizes: \(a.joined(separator: ", ")))"
        case .noVideoInput: return "the session has no video input"
        case .notInConfiguration: return "commitConfiguration() without beginConfiguration()"
        case .notLockedForConfiguration(let d): return "device '\(d)' must be locked for configuration first (lockForConfiguration)"
        case .lockedByAnotherClient(let d): return "device '\(d)' is already locked for configuration (by another client, or by this one without unlockForConfiguration())"
        case .unsupportedMode(let d, let m, let r): return "device '\(d)' does not support \(m): \(r)"
        case .unsupportedRotation(let a): return "rotation \(a)° is not supported (use 0, 90, 180 or 270)"
        case .invalidConfiguration(let r): return "invalid session configuration: \(r)"
        case .alreadyRunning: return "the session is already running"
        }
    }
}
