import Viewfinder
import ViewfinderAudio

/// A media type that also names the kind of device it finds, so that
/// `CaptureDevice.default(for: .video)` gives a camera and `CaptureDevice.default(for: .audio)` a
/// microphone (AVFoundation's `AVCaptureDevice.default(for:)`), each with its own type.
public struct CaptureDeviceKind<Device>: Sendable {
    public let mediaType: MediaType
}

extension CaptureDeviceKind where Device == CaptureDevice {
    /// Cameras (V4L2 devices, else the sim camera).
    public static var video: Self { Self(mediaType: .video) }
}

extension CaptureDeviceKind where Device == AudioCaptureDevice {
    /// Microphones (ALSA capture devices).
    public static var audio: Self { Self(mediaType: .audio) }
}

extension CaptureDevice {
    /// The default camera: the first V4L2 camera if one is present, else the sim camera; nil when
    /// it cannot be opened. `defaultDevice(directory:)` says why.
    public static func `default`(for kind: CaptureDeviceKind<CaptureDevice>, directory: DeviceDirectory = .standard) -> CaptureDevice? {
        try? defaultDevice(directory: directory)
    }

    /// The default microphone: ALSA's `default` PCM when it can capture, else the first kernel
    /// capture device; nil when there is none (a machine without a sound card).
    /// `AudioCaptureDevice.defaultDevice()` throws the reason instead.
    public static func `default`(for kind: CaptureDeviceKind<AudioCaptureDevice>) -> AudioCaptureDevice? {
        try? AudioCaptureDevice.defaultDevice()
    }
}
