@_exported import Viewfinder
@_exported import ViewfinderStages

extension StageRegistry {
    /// Every built-in stage.
    public static var builtIn: StageRegistry { .viewfinderStages }
}

extension DeviceDirectory {
    /// Every kind of device the engine opens: the sim camera, V4L2 cameras, dump replay and the
    /// test pattern.
    public static var standard: DeviceDirectory {
        DeviceDirectory(providers: KitProviders.all)
    }
}

enum KitProviders {
    static var all: [any DeviceProvider] { [PatternProvider()] }
}
