@_exported import Viewfinder
@_exported import ViewfinderSim
@_exported import ViewfinderStages
@_exported import ViewfinderV4L2
@_exported import ViewfinderSinks
@_exported import ViewfinderAudio

extension StageRegistry {
    /// Every built-in stage, with ``BuiltInControlStages`` carrying out the devices' exposure and
    /// focus modes.
    public static var builtIn: StageRegistry { StageRegistry.viewfinderStages.withControlStages(BuiltInControlStages()) }
}

extension DeviceDirectory {
    /// Every kind of device the engine opens: the sim camera, V4L2 cameras, dump replay and the
    /// test pattern; MJPEG frames are decoded for stages that ask for pixels by TurboJPEG.
    public static var standard: DeviceDirectory {
        DeviceDirectory(providers: KitProviders.all, pixelDecoders: MJPEGPixelDecoder.Factory())
    }
}

enum KitProviders {
    static var all: [any DeviceProvider] { [SimProvider(), V4L2Provider(), DumpProvider(), PatternProvider()] }
}
