import Viewfinder

extension LumaView {
    /// The kernels' view of a luma `PlaneView`.
    public init(_ plane: PlaneView) {
        self.init(base: plane.unsafeBaseAddress, width: plane.width, height: plane.height, bytesPerRow: plane.bytesPerRow, pixelStride: plane.sampleStride)
    }

    /// The luma of `frame`'s pixels whatever its format: its own plane, or the decoded view the
    /// engine made for MJPEG, RGB or Bayer (possibly reduced: see `FramePixels/scale`).
    public init?(pixelsOf frame: Frame) {
        guard let p = frame.pixels else { return nil }
        self.init(p.luma)
    }
}

extension StageContext {
    /// Declares that the stage meters luma (statistics at a reduced size will do): on MJPEG the
    /// engine then decodes each frame at 1/2–1/8, the smallest scale still `minimumWidth` wide.
    func needStatistics(_ stage: String, minimumWidth: Int) throws {
        try pixels.need(.statistics(minimumWidth: minimumWidth), stage: stage)
    }
}
