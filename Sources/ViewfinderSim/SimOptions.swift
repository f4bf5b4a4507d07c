import Viewfinder
/// Options of the simulated camera, parsed from its device string
/// `sim:key=value,key=value,...` (`sim` alone takes every default). The table in ``fields`` is the
/// documentation: `viewfinder devices` prints it with units, ranges and defaults.
public struct SimOptions: DeviceOptionTable, Equatable {
    public var width = 1280
    public var height = 720
    public var fps = 30.0
    public var format = PixelFormat.yuyv
    public var quality = 85
    public var scene: String? = nil
    public var shake = 0.0
    public var flicker = 0
    public var flickerDepth = 0.4
    public var latency = 2
    public var jitterMs = 0.0
    public var paced = true
    public var seed: UInt64 = 1
    public var frames: UInt64 = 0
    public var noise = 1.0
    public var subject = 0.5
    public var light = 1.0
    public var exposureMs = 10.0
    public var gain = 1.0
    public var focus = 400.0
    public var gamma = 2.2
    public var buffers = 8
    public var colorTemperature = 5200.0

    public init() {}

    /// Option names, in documentation order.
    public static var names: [String] { fields.map(\.name) }

    public static var fields: [OptionField<SimOptions>] {
        [
            .int("width", \.width, range: 64...7680, unit: "pixels", "Output width (even)"),
            .int("height", \.height, range: 64...4320, unit: "pixels", "Output height (even)"),
            .double("fps", \.fps, range: 0.1...240, unit: "frames/s", "Frame rate; also caps the exposure time"),
            .pixelFormat("format", \.format, allowed: formats, "Pixel format the sim renders"),
            .int("quality", \.quality, range: 1...100, "JPEG quality for mjpeg"),
            .path("scene", \.scene, "Image to film (JPEG, or binary PPM/PGM); none: the built-in procedural scene"),
            .double("shake", \.shake, range: 0...64, unit: "pixels RMS", "Hand-shake amplitude per axis (rotation RMS is shake x 0.0004 rad)"),
            .int("flicker", \.flicker, range: 0...60, unit: "Hz", "Mains frequency of the lighting: 0 (steady), 50 or 60; light is modulated at twice it"),
            .double("flicker_depth", \.flickerDepth, range: 0...1, unit: "fraction", "Modulation depth of the flickering light (0.4 = ±40 %)"),
            .int("latency", \.latency, range: 1...30, unit: "frames", "Frames between a control set and the first frame it affects"),
            .double("jitter", \.jitterMs, range: 0...100, unit: "ms RMS", "Timing jitter: each frame's delivery and timestamp move off the fps grid by a seeded Gaussian of this standard deviation (clipped to 3 sigma and 0.45 frame intervals); paced only"),
            .bool("paced", \.paced, "true: real time at fps, a live source; false: as fast as possible, not live"),
            .int("seed", \.seed, "Seed of the shake path, the noise and the procedural scene"),
            .int("frames", \.frames, unit: "frames", "End the stream after this many sensor frames (0: never)"),
            .double("noise", \.noise, range: 0...10, unit: "factor", "Scale of the sensor noise (shot and read noise); 0: noiseless"),
            .double("subject", \.subject, range: 0.2...1000, unit: "metres", "Distance of the scene; in focus at lens position 1000 x 0.2 m / subject"),
            .double("light", \.light, range: 0.001...1000, unit: "factor", "Scene illumination relative to the reference (1: bright sky)"),
            .double("exposure", \.exposureMs, range: 0.1...1000, unit: "ms", "Initial exposure time (control exposure_time_absolute)"),
            .double("gain", \.gain, range: 1...16, unit: "x", "Initial analogue gain (control gain = 100 x this)"),
            .double("focus", \.focus, range: 0...1000, unit: "lens position", "Initial lens position (control focus_absolute)"),
            .double("gamma", \.gamma, range: 1...3, "Tone curve: luma = 255 x signal^(1/gamma)"),
            .int("buffers", \.buffers, range: 2...64, unit: "frames", "Frames in the sim's pool"),
            .double("colortemp", \.colorTemperature, range: 2000...10000, unit: "kelvin", "Colour temperature of the scene's light"),
        ]
    }

    public func validate() throws(OptionProblem) {
        if width % 2 != 0 { throw .invalid(option: "width", reason: "expected an even width, got '\(width)'") }
        if height % 2 != 0 { throw .invalid(option: "height", reason: "expected an even height, got '\(height)'") }
        if ![0, 50, 60].contains(flicker) { throw .invalid(option: "flicker", reason: "expected 0, 50 or 60 (Hz), got '\(flicker)'") }
    }

    /// Formats the sim renders.
    public static let formats: [PixelFormat] = [.yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey, .mjpeg]

    /// The lens position at which a subject at `distance` metres is sharp (0...1000).
    public static func inFocusPosition(subjectDistance distance: Double) -> Double {
        min(1000, max(0, 1000 * 0.2 / distance))
    }

    /// Parses a device string `sim` or `sim:key=value,...`. Throws
    /// `DeviceError.invalidDeviceOption(device:option:reason:)` naming the bad option.
    public init(deviceString s: String) throws(DeviceError) {
        let body: Substring
        if s == "sim" { body = "" }
        else if s.hasPrefix("sim:") { body = s.dropFirst(4) }
        else { throw DeviceError.unknownDevice(s, reason: "the sim camera's device string starts with 'sim'") }
        self = try SimOptions.decode(keyValues: body, device: s)
    }
}

extension SimProvider: DocumentedDeviceProvider {
    public var documentation: DeviceKindDocumentation {
        DeviceKindDocumentation(syntax: "sim[:key=value,…]", summary: "The simulated camera: a physical model of a sensor and lens filming a scene, with exposure, gain and focus controls.", options: SimOptions.self)
    }
}
