@_exported import Viewfinder
@_exported import ViewfinderStages

extension StageRegistry {
    /// Every built-in stage.
    public static var builtIn: StageRegistry { .viewfinderStages }
}
