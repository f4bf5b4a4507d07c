import Viewfinder

// The sinks as outputs of a `CaptureSession` (AVFoundation's AVCaptureOutput subclasses).

extension PhotoOutput: CaptureOutput {
    public var acceptedMediaTypes: Set<MediaType> { [.video] }

    /// Remembers the connection (for the EXIF orientation of settings that leave it unset) and,
    /// when the input is a device with exposure controls and no bracketer was given, brackets
    /// through those controls.
    public func sessionDidConnect(_ connection: CaptureConnection) {
        connectionBox.withLock { $0 = WeakConnection(connection) }
        if bracketer == nil, let input = connection.input as? CaptureDeviceInput, let controls = input.device.controls, controls.supports(.exposureTime) {
            let device = input.device
            // The longest exposure the device's exposure may use (its longest frame duration,
            // else its frame interval).
            bracketer = DeviceExposureBracketer(controls: controls, maximumExposureSeconds: { [weak device] in
                device.map { Double($0.activeVideoMaxFrameDuration.nanoseconds) / 1e9 }
            })
        }
        if flash == nil, let input = connection.input as? CaptureDeviceInput, input.device.hasFlash {
            flash = DeviceFlash(device: input.device)
        }
    }

    public func sessionDidDisconnect(_ connection: CaptureConnection) {
        connectionBox.forget(connection)
    }

    /// The orientation the connection asks for (rotation and mirroring), `.up` without one.
    var connectionOrientation: ExifOrientation {
        connectionBox.withLock { c in c.connection.flatMap { ExifOrientation(rawValue: UInt16($0.exifOrientation)) } ?? .up }
    }
}

extension MovieFileOutput: CaptureOutput {
    public var acceptedMediaTypes: Set<MediaType> { [.video, .audio] }

    /// Remembers the video connection: a recording started with ``MovieOutputSettings/rotation``
    /// 0 takes the connection's rotation into the movie's track matrix.
    public func sessionDidConnect(_ connection: CaptureConnection) {
        guard connection.mediaType == .video else { return }
        connectionBox.withLock { $0 = WeakConnection(connection) }
    }

    public func sessionDidDisconnect(_ connection: CaptureConnection) {
        connectionBox.forget(connection)
    }
}

extension RawDumpOutput: CaptureOutput {
    /// Frames and, from a session with a microphone, its sound (audio records).
    public var acceptedMediaTypes: Set<MediaType> { [.video, .audio] }
}

extension FramePipeOutput: CaptureOutput {
    public var acceptedMediaTypes: Set<MediaType> { [.video] }
}

extension SharedMemoryOutput: CaptureOutput {
    public var acceptedMediaTypes: Set<MediaType> { [.video] }
}

/// A connection held without keeping it alive.
struct WeakConnection: Sendable {
    // The connection is Sendable (its state is locked); weak so the output never extends its life.
    weak var connection: CaptureConnection?
    init(_ c: CaptureConnection?) { connection = c }
}

extension LockedBox where Value == WeakConnection {
    /// Forgets `connection` if it is the one held (an output's `sessionDidDisconnect`).
    func forget(_ connection: CaptureConnection) {
        withLock { if $0.connection === connection { $0 = WeakConnection(nil) } }
    }
}
