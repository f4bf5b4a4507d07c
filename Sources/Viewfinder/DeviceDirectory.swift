/// Finds and opens devices by their string: `sim[:options]`, `/dev/videoN`, `dump:FILE`, …
///
/// The core opens the test pattern (`pattern:`) through ``PatternProvider``; the sim camera
/// (`ViewfinderSim`), V4L2 (`ViewfinderV4L2`) and dump replay (`ViewfinderSinks`) are providers of
/// their own modules, all in ViewfinderKit's `DeviceDirectory.standard`.
public struct DeviceDirectory: Sendable {
    public var providers: [any DeviceProvider]
    /// Decoders that give stages pixels of formats without YUV planes (MJPEG); devices opened
    /// through the directory carry them to the session (``CaptureDevice/pixelDecoders``).
    public var pixelDecoders: (any PixelDecoderFactory)?

    public init(providers: [any DeviceProvider], pixelDecoders: (any PixelDecoderFactory)? = nil) {
        self.providers = providers
        self.pixelDecoders = pixelDecoders
    }

    /// Opens `device`, or throws ``DeviceError/unknownDevice(_:reason:)`` naming it.
    public func open(_ device: String) throws -> any CaptureSource {
        guard let p = providers.first(where: { $0.handles(device) }) else {
            throw DeviceError.unknownDevice(device, reason: "not a known kind of device (expected sim[:options], pattern[:options], /dev/videoN or dump:FILE; `viewfinder devices` lists them)")
        }
        return try p.open(device)
    }

    /// Every device present now.
    public func discover() -> [DeviceInfo] { providers.flatMap { $0.discover() } }
}
