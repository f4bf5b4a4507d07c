import Viewfinder

/// Turns the picture into its negative (luma only; chroma is left as is), and records the mean
/// luma it saw. A user-written stage: this file is all it takes to register it.
public final class Negative: Stage {
    public static let name = "negative"
    public static let summary = "Inverts luma and records the mean luma before inversion."

    public struct Options: StageOptions {
        /// Strength of the inversion: 0 leaves the frame alone, 1 is a full negative.
        public var strength = 1.0
        public init() {}
        public static var fields: [OptionField<Options>] {
            [.double("strength", \.strength, range: 0...1, unit: "fraction", "0 leaves the frame alone, 1 is a full negative")]
        }
    }

    private let strength: Double
    private let meanKey = MetadataKey("negative.mean_luma")
    private var layout: (offset: Int, pixelStride: Int, bytesPerRow: Int)?

    public init(options: Options) { strength = options.strength }

    public func prepare(format: FrameFormat, context: StageContext) throws {
        guard let l = format.lumaLayout else {
            throw ConfigurationError.invalidOption(stage: Self.name, option: "format", reason: "\(format.pixelFormat) has no luma plane")
        }
        layout = l
    }

    public func process(_ frame: Frame) -> StageVerdict {
        guard let l = layout else { return .forward }
        let w = frame.format.width, h = frame.format.height
        let k = Int(strength * 256)
        var sum = 0
        for y in 0..<h {
            let row = (frame.data + l.offset + y * l.bytesPerRow).assumingMemoryBound(to: UInt8.self)
            var x = 0
            while x < w {
                let v = Int(row[x &* l.pixelStride])
                sum &+= v
                row[x &* l.pixelStride] = UInt8(truncatingIfNeeded: (v &* (256 &- k) &+ (255 &- v) &* k) >> 8)
                x &+= 1
            }
        }
        frame.metadata.custom.set(meanKey, Double(sum) / Double(w * h))
        frame.pixelsModified = true
        return .forward
    }
}
