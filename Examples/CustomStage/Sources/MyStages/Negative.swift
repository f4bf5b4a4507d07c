import Viewfinder

/// Turns the picture into its negative (luma only; chroma is left as is), and records the mean
/// luma it saw. A user-written stage: this file is all it takes to register it.
///
/// It reads and writes pixels through the typed views, so it works on every camera format —
/// YUYV, NV12, planar YUV, and MJPEG, RGB or Bayer through the decoded view the engine makes
/// because `prepare` asks for full-size planes to change.
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

    public init(options: Options) { strength = options.strength }

    public func prepare(format: FrameFormat, context: StageContext) throws {
        try context.pixels.need(.modify, stage: Self.name)
    }

    public func process(_ frame: Frame) -> StageVerdict {
        guard let px = frame.mutablePixels() else { return .forward }
        let k = Int(strength * 256)
        var sum = 0
        for y in 0..<px.height {
            let row = px.luma.row(y)
            for x in 0..<row.count {
                let v = Int(row[x])
                sum &+= v
                row[x] = UInt8(truncatingIfNeeded: (v &* (256 &- k) &+ (255 &- v) &* k) >> 8)
            }
        }
        frame.metadata.custom.set(meanKey, Double(sum) / Double(px.width * px.height))
        return .forward
    }
}
