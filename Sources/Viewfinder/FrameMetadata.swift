/// Why a frame did not reach the end of the pipeline.
public enum DropReason: Int, Sendable, CaseIterable, Codable, CustomStringConvertible {
    /// Older than the consumer's budget, or superseded by a newer frame while the consumer was busy.
    case late
    /// A ring between two threads was full.
    case ringFull
    /// No free buffer: consumers held all of them.
    case outOfBuffers
    /// A stage decided to drop it.
    case stage
    /// The data was corrupt (a JPEG that does not decode, a buffer flagged with an error).
    case corrupt
    /// The driver skipped it: a gap in the device's sequence numbers.
    case driverGap
    /// The output fell further behind than its buffer budget (``BufferBudget``): its storage
    /// stalled (a throttled disk, an `fsync` taking seconds) and the frames it had no room for
    /// were dropped at its door, with the frames already queued kept in order.
    case storageBacklog

    public var description: String { name }

    /// The name used in summaries and JSON.
    public var name: String {
        switch self {
        case .late: return "late"
        case .ringFull: return "ring_full"
        case .outOfBuffers: return "out_of_buffers"
        case .stage: return "stage"
        case .corrupt: return "corrupt"
        case .driverGap: return "driver_gap"
        case .storageBacklog: return "storage_backlog"
        }
    }
}

/// The simulator's ground truth for one frame, so tests can score control loops.
public struct SimulationTruth: Sendable, Equatable, Codable {
    /// Horizontal shake offset of the view, in pixels (positive: content moved right).
    public var shakeX: Double = 0
    /// Vertical shake offset, pixels (positive: content moved down).
    public var shakeY: Double = 0
    /// Shake rotation, radians (positive: counter-clockwise as seen).
    public var shakeAngle: Double = 0
    /// The lens position (in the focus control's units) at which the subject is sharp.
    public var inFocusLensPosition: Double = 0
    /// Mean scene luminance before exposure, relative to mid grey (1.0 = 18% grey).
    public var sceneLuminance: Double = 1
    /// Exposure time that actually produced this frame, µs.
    public var appliedExposure: Double = 0
    /// Gain that actually produced this frame (1.0 = ISO 100).
    public var appliedGain: Double = 1
    /// Lens position that actually produced this frame.
    public var appliedLensPosition: Double = 0
    /// Blur radius caused by defocus, pixels.
    public var defocusBlur: Double = 0
    /// Mean of the rendered luma (0–255) as the sensor produced it.
    public var renderedMeanLuma: Double = 0
    /// Colour temperature of the scene's light, K (the sim's `colortemp`).
    public var colorTemperature: Double = 0
    public init() {}
}

/// A global motion between two frames or a correction applied to one.
public struct MotionEstimate: Sendable, Equatable, Codable {
    /// Translation in pixels.
    public var dx: Double = 0
    public var dy: Double = 0
    /// Rotation in radians.
    public var angle: Double = 0
    /// Scale factor (1 = none).
    public var scale: Double = 1
    /// Confidence of the estimate, 0–1.
    public var confidence: Double = 1
    public init(dx: Double = 0, dy: Double = 0, angle: Double = 0, scale: Double = 1, confidence: Double = 1) {
        self.dx = dx; self.dy = dy; self.angle = angle; self.scale = scale; self.confidence = confidence
    }
}

/// State of a control loop (exposure, focus, white balance) on this frame.
public enum ControlLoopState: String, Sendable, Codable {
    case inactive, adjusting, converged, locked, scanning
}

/// Focus measures of a region of the frame.
public struct FocusMeasure: Sendable, Equatable, Codable {
    /// Variance of the Laplacian, normalised by mean brightness squared.
    public var laplacianVariance: Double
    /// Tenengrad (mean squared Sobel gradient), normalised by mean brightness squared.
    public var tenengrad: Double
    public init(laplacianVariance: Double, tenengrad: Double) {
        self.laplacianVariance = laplacianVariance
        self.tenengrad = tenengrad
    }
}

/// An interned name for a user-defined metadata value; make one once (at stage init), reuse it.
public struct MetadataKey: Hashable, Sendable, CustomStringConvertible {
    public let id: Int32
    public var description: String { MetadataKey.name(of: id) }

    private static let names = LockedBox<[String]>([])

    /// Interns `name` and returns its key. Call outside the hot path.
    public init(_ name: String) {
        id = MetadataKey.names.withLock { names in
            if let i = names.firstIndex(of: name) { return Int32(i) }
            names.append(name)
            return Int32(names.count - 1)
        }
    }

    public static func name(of id: Int32) -> String {
        names.withLock { id >= 0 && Int(id) < $0.count ? $0[Int(id)] : "?" }
    }
}

/// Up to ``capacity`` (32) custom numeric values per frame, stored inline so that no frame
/// allocates. The built-in stages use up to six (`ae.exposure_us`, `ae.gain`, `ae.spot_x`,
/// `ae.spot_y`, `af.lens_target`, `zoom.factor`); the rest are the user's stages'.
///
/// A key set when every slot holds another key is not stored: ``set(_:_:)`` returns false and the
/// frame counts it in ``refused``, which `MetadataWriter` writes as `custom_refused` and the engine
/// counts in ``EngineStatistics/framesWithRefusedMetadata`` (and logs once per run) — a value is
/// never lost without a trace.
public struct CustomMetadata: Sendable, Equatable {
    public static let capacity = 32
    @usableFromInline var keys = InlineArray<32, Int32>(repeating: -1)
    @usableFromInline var values = InlineArray<32, Double>(repeating: 0)
    public private(set) var count: Int = 0
    /// `set` calls on this frame that found no free slot (each call counts, a key set twice twice).
    public private(set) var refused: Int = 0

    public init() {}

    public static func == (a: CustomMetadata, b: CustomMetadata) -> Bool {
        a.count == b.count && a.refused == b.refused && a.entries.elementsEqual(b.entries, by: { $0.0 == $1.0 && $0.1 == $1.1 })
    }

    /// Sets `key` to `value`. Returns false, and counts the key in ``refused``, when all slots are
    /// taken by other keys.
    @discardableResult
    public mutating func set(_ key: MetadataKey, _ value: Double) -> Bool {
        for i in 0..<count where keys[i] == key.id { values[i] = value; return true }
        guard count < CustomMetadata.capacity else { refused &+= 1; return false }
        keys[count] = key.id; values[count] = value; count += 1
        return true
    }

    public func value(_ key: MetadataKey) -> Double? {
        for i in 0..<count where keys[i] == key.id { return values[i] }
        return nil
    }

    /// The stored (key, value) pairs.
    public var entries: [(MetadataKey, Double)] {
        (0..<count).map { (MetadataKey(unchecked: keys[$0]), values[$0]) }
    }

    public mutating func removeAll() { count = 0; refused = 0 }
}

extension MetadataKey {
    init(unchecked id: Int32) { self.id = id }
}

/// Typed per-frame metadata attached by sources and stages. A fixed-size value: no allocation.
public struct FrameMetadata: Sendable, Equatable {
    /// Exposure time the frame was taken with, µs.
    public var exposureTime: Double?
    /// Analogue gain (1.0 = unity, ISO 100).
    public var gain: Double?
    /// Lens (focus) position in the device's focus units.
    public var lensPosition: Double?
    /// The control values the frame was exposed with, in device units: set by the capture side
    /// from the writes it made and the device's control latency (``DelayedControls``). Stages read
    /// these instead of asking the device.
    public var exposedWith = ExposedControls()
    /// White balance temperature, K: what the camera balances for (a source's own record), or
    /// the `white_balance` stage's estimate of the light (or its locked setting) once it ran.
    public var whiteBalance: Double?
    /// State of the white-balance loop.
    public var whiteBalanceState: ControlLoopState?
    /// Focus measures of the metered region.
    public var focus: FocusMeasure?
    /// State of the autofocus loop.
    public var focusState: ControlLoopState?
    /// State of the auto-exposure loop.
    public var exposureState: ControlLoopState?
    /// Mean metered luma (0–255) and the EV error to target the exposure stage saw.
    public var meteredLuma: Double?
    public var exposureError: Double?
    /// Motion estimated between the previous frame and this one.
    public var motion: MotionEstimate?
    /// Correction the stabiliser applied.
    public var correction: MotionEstimate?
    /// Ground truth from the simulated camera.
    public var truth: SimulationTruth?
    /// Frames lost between the previous delivered frame and this one on this path.
    public var droppedBefore: UInt32 = 0
    /// Time spent in the stage chain, ns.
    public var stageNanoseconds: UInt64 = 0
    /// Values of user-defined stages.
    public var custom = CustomMetadata()

    public init() {}
}
