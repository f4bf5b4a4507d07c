import Viewfinder

/// Does nothing to the frame: measures the pipeline's own overhead.
public final class NullStage: Stage {
    public static let name = "null"
    public static let summary = "Forwards every frame untouched (for measuring the engine's overhead)."
    public init(options: NoOptions) {}
    public func process(_ frame: Frame) -> StageVerdict { .forward }
}
