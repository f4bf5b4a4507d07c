/// Refuses a geometry whose rows overlap or whose sizes are negative (both plane views).
@usableFromInline
func checkPlaneGeometry(width: Int, height: Int, bytesPerRow: Int, sampleStride: Int) {
    precondition(width >= 0 && height >= 0 && sampleStride >= 1 && (height <= 1 || bytesPerRow >= (width - 1) * sampleStride + 1), "inconsistent plane geometry")
}

/// The byte index of sample (`x`, `y`), bounds-checked (the check folds away in loops over
/// `0..<width` and `0..<height`).
@inlinable @inline(__always)
func sampleIndex(x: Int, y: Int, width: Int, height: Int, bytesPerRow: Int, sampleStride: Int) -> Int {
    precondition(UInt(bitPattern: x) < UInt(bitPattern: width) && UInt(bitPattern: y) < UInt(bitPattern: height), "pixel outside the plane")
    return y &* bytesPerRow &+ x &* sampleStride
}

/// Typed views of a frame's pixels, the same whatever the camera sends.
///
/// A stage reads luma and chroma through ``FramePixels`` (from ``Frame/pixels``) and changes them
/// through ``MutableFramePixels`` (from ``Frame/mutablePixels()``): packed 4:2:2 (YUYV, UYVY),
/// NV12, planar I420/YUV422P, GREY, and — through the decoded view the engine provides — MJPEG,
/// RGB and Bayer all look alike: a luma ``PlaneView`` and, except for GREY, two chroma planes.
///
/// Every access is bounds-checked (`[x, y]`, ``PlaneView/row(_:)``): a bad index traps instead of
/// reading another frame's memory. The checks are two unsigned compares that the optimiser hoists
/// out of loops running over `0..<width` and `0..<height` (measured in the Stages benchmark
/// `PlaneView sum`: the checked view and raw pointer arithmetic run at the same speed).
///
/// The views are valid while the frame is lent to the caller (``Stage/process(_:)``,
/// ``FrameConsumer/consume(_:)``) or owned (``SampleBuffer``, ``FrameLease``); do not keep them
/// beyond that.
public struct PlaneView: @unchecked Sendable {
    // @unchecked Sendable: a view is a pointer and a geometry over a frame that one thread uses at a
    // time (the frame's own discipline).
    @usableFromInline let base: UnsafePointer<UInt8>
    /// Samples per row.
    public let width: Int
    /// Rows.
    public let height: Int
    /// Bytes from one row to the next.
    public let bytesPerRow: Int
    /// Bytes from one sample to the next in a row (1 planar, 2 for luma and NV12 chroma, 4 for
    /// packed 4:2:2 chroma).
    public let sampleStride: Int

    /// A view over memory the caller guarantees for the view's use: `height` rows of `width`
    /// samples, `sampleStride` bytes apart, rows `bytesPerRow` apart.
    public init(unsafeBase base: UnsafePointer<UInt8>, width: Int, height: Int, bytesPerRow: Int, sampleStride: Int = 1) {
        checkPlaneGeometry(width: width, height: height, bytesPerRow: bytesPerRow, sampleStride: sampleStride)
        self.base = base
        self.width = width
        self.height = height
        self.bytesPerRow = bytesPerRow
        self.sampleStride = sampleStride
    }

    /// The sample at column `x`, row `y`.
    @inlinable
    public subscript(x: Int, y: Int) -> UInt8 {
        @inline(__always) get {
            return base[sampleIndex(x: x, y: y, width: width, height: height, bytesPerRow: bytesPerRow, sampleStride: sampleStride)]
        }
    }

    /// Row `y`.
    @inlinable
    public func row(_ y: Int) -> PlaneRow {
        precondition(UInt(bitPattern: y) < UInt(bitPattern: height), "row outside the plane")
        return PlaneRow(base: base + y &* bytesPerRow, count: width, stride: sampleStride)
    }

    /// Every row, top to bottom.
    public var rows: Rows { Rows(plane: self) }

    /// The part of the plane at `x, y` of `width`×`height` samples (clamped to the plane).
    public func cropped(x: Int, y: Int, width w: Int, height h: Int) -> PlaneView {
        let x0 = min(max(0, x), width), y0 = min(max(0, y), height)
        let x1 = min(max(x0, x &+ w), width), y1 = min(max(y0, y &+ h), height)
        return PlaneView(unsafeBase: base + (y0 &* bytesPerRow &+ x0 &* sampleStride), width: x1 - x0, height: y1 - y0, bytesPerRow: bytesPerRow, sampleStride: sampleStride)
    }

    /// The first sample, for kernels that walk the plane themselves (``bytesPerRow``,
    /// ``sampleStride``); valid while the view is.
    public var unsafeBaseAddress: UnsafePointer<UInt8> { base }

    /// The rows of a plane, as a random-access collection.
    public struct Rows: RandomAccessCollection {
        @usableFromInline let plane: PlaneView
        public var startIndex: Int { 0 }
        public var endIndex: Int { plane.height }
        @inlinable public subscript(y: Int) -> PlaneRow { plane.row(y) }
    }
}

/// One row of a plane: `count` samples, bounds-checked.
public struct PlaneRow: RandomAccessCollection, @unchecked Sendable {
    @usableFromInline let base: UnsafePointer<UInt8>
    public let count: Int
    /// Bytes between samples (1 when the row is contiguous).
    public let stride: Int

    @inlinable init(base: UnsafePointer<UInt8>, count: Int, stride: Int) {
        self.base = base; self.count = count; self.stride = stride
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }

    @inlinable
    public subscript(x: Int) -> UInt8 {
        @inline(__always) get {
            precondition(UInt(bitPattern: x) < UInt(bitPattern: count), "sample outside the row")
            return base[x &* stride]
        }
    }

    /// The row's bytes as a `Span` (`count` samples `stride` bytes apart: the span holds
    /// `(count - 1) * stride + 1` bytes), for the duration of `body`.
    @inlinable
    public func withBytes<R>(_ body: (Span<UInt8>) throws -> R) rethrows -> R {
        let n = count == 0 ? 0 : (count &- 1) &* stride &+ 1
        return try body(UnsafeBufferPointer(start: base, count: n).span)
    }
}

/// A plane whose samples a stage may change. See ``PlaneView``.
public struct MutablePlaneView: @unchecked Sendable {
    @usableFromInline let base: UnsafeMutablePointer<UInt8>
    public let width: Int
    public let height: Int
    public let bytesPerRow: Int
    public let sampleStride: Int

    public init(unsafeBase base: UnsafeMutablePointer<UInt8>, width: Int, height: Int, bytesPerRow: Int, sampleStride: Int = 1) {
        checkPlaneGeometry(width: width, height: height, bytesPerRow: bytesPerRow, sampleStride: sampleStride)
        self.base = base
        self.width = width
        self.height = height
        self.bytesPerRow = bytesPerRow
        self.sampleStride = sampleStride
    }

    /// The sample at column `x`, row `y`.
    @inlinable
    public subscript(x: Int, y: Int) -> UInt8 {
        @inline(__always) get {
            return base[sampleIndex(x: x, y: y, width: width, height: height, bytesPerRow: bytesPerRow, sampleStride: sampleStride)]
        }
        @inline(__always) nonmutating set {
            base[sampleIndex(x: x, y: y, width: width, height: height, bytesPerRow: bytesPerRow, sampleStride: sampleStride)] = newValue
        }
    }

    /// Row `y`, to change.
    @inlinable
    public func row(_ y: Int) -> MutablePlaneRow {
        precondition(UInt(bitPattern: y) < UInt(bitPattern: height), "row outside the plane")
        return MutablePlaneRow(base: base + y &* bytesPerRow, count: width, stride: sampleStride)
    }

    /// The same plane, read-only.
    public var view: PlaneView { PlaneView(unsafeBase: UnsafePointer(base), width: width, height: height, bytesPerRow: bytesPerRow, sampleStride: sampleStride) }

    /// The first sample, for kernels that walk the plane themselves.
    public var unsafeBaseAddress: UnsafeMutablePointer<UInt8> { base }
}

/// One row of a plane that may be changed: `count` samples, bounds-checked.
public struct MutablePlaneRow: @unchecked Sendable {
    @usableFromInline let base: UnsafeMutablePointer<UInt8>
    public let count: Int
    public let stride: Int

    @inlinable init(base: UnsafeMutablePointer<UInt8>, count: Int, stride: Int) {
        self.base = base; self.count = count; self.stride = stride
    }

    @inlinable
    public subscript(x: Int) -> UInt8 {
        @inline(__always) get {
            precondition(UInt(bitPattern: x) < UInt(bitPattern: count), "sample outside the row")
            return base[x &* stride]
        }
        @inline(__always) nonmutating set {
            precondition(UInt(bitPattern: x) < UInt(bitPattern: count), "sample outside the row")
            base[x &* stride] = newValue
        }
    }

    /// The row's bytes as a `MutableSpan` (samples `stride` bytes apart), for the duration of `body`.
    @inlinable
    public func withMutableBytes<R>(_ body: (inout MutableSpan<UInt8>) throws -> R) rethrows -> R {
        let n = count == 0 ? 0 : (count &- 1) &* stride &+ 1
        var span = UnsafeMutableBufferPointer(start: base, count: n).mutableSpan
        return try body(&span)
    }
}

/// A frame's pixels as luma and chroma planes, whatever its format (see ``PlaneView``).
public struct FramePixels: Sendable {
    /// Luma, ``width``×``height``.
    public let luma: PlaneView
    /// Blue-difference and red-difference chroma; nil for GREY.
    public let cb: PlaneView?
    public let cr: PlaneView?
    /// Luma samples per chroma sample across (1 or 2) and down (1 or 2).
    public let chromaStepX: Int
    public let chromaStepY: Int
    /// How much smaller than the frame these planes are (1 full size; 2, 4 or 8 for a reduced
    /// decode of an MJPEG frame): frame coordinates are plane coordinates times ``scale``.
    public let scale: Int
    /// The layout the planes come from: the frame's own format, or the decoded view's.
    public let format: FrameFormat

    public var width: Int { luma.width }
    public var height: Int { luma.height }

    /// Luma at (x, y).
    @inlinable
    public func y(_ x: Int, _ y: Int) -> UInt8 { luma[x, y] }

    /// Chroma (cb, cr) of the pixel at luma coordinates (x, y); (128, 128) for GREY.
    @inlinable
    public func chroma(_ x: Int, _ y: Int) -> (cb: UInt8, cr: UInt8) {
        guard let cb, let cr else {
            precondition(UInt(bitPattern: x) < UInt(bitPattern: luma.width) && UInt(bitPattern: y) < UInt(bitPattern: luma.height), "pixel outside the plane")
            return (128, 128)
        }
        return (cb[x / chromaStepX, y / chromaStepY], cr[x / chromaStepX, y / chromaStepY])
    }

    /// The views over a frame laid out as `format` at `data` (nil for formats without YUV planes).
    public init?(format: FrameFormat, data: UnsafeRawPointer, capacity: Int, scale: Int = 1) {
        guard let g = PlaneGeometries(format, capacity: capacity) else { return nil }
        func view(_ p: PlaneGeometries.Plane) -> PlaneView {
            PlaneView(unsafeBase: data.assumingMemoryBound(to: UInt8.self) + p.offset, width: p.width, height: p.height, bytesPerRow: p.bytesPerRow, sampleStride: p.stride)
        }
        luma = view(g.luma)
        cb = g.cb.map(view)
        cr = g.cr.map(view)
        chromaStepX = g.stepX
        chromaStepY = g.stepY
        self.scale = scale
        self.format = format
    }
}

/// A frame's pixels, to change (see ``Frame/mutablePixels()``). Always full size.
public struct MutableFramePixels: Sendable {
    public let luma: MutablePlaneView
    public let cb: MutablePlaneView?
    public let cr: MutablePlaneView?
    public let chromaStepX: Int
    public let chromaStepY: Int
    /// The layout the planes come from: the frame's own format, or the decoded view's.
    public let format: FrameFormat

    public var width: Int { luma.width }
    public var height: Int { luma.height }

    /// The same pixels, read-only.
    public var view: FramePixels {
        FramePixels(luma: luma.view, cb: cb?.view, cr: cr?.view, chromaStepX: chromaStepX, chromaStepY: chromaStepY, scale: 1, format: format)
    }

    public init?(format: FrameFormat, data: UnsafeMutableRawPointer, capacity: Int) {
        guard let g = PlaneGeometries(format, capacity: capacity) else { return nil }
        func view(_ p: PlaneGeometries.Plane) -> MutablePlaneView {
            MutablePlaneView(unsafeBase: data.assumingMemoryBound(to: UInt8.self) + p.offset, width: p.width, height: p.height, bytesPerRow: p.bytesPerRow, sampleStride: p.stride)
        }
        luma = view(g.luma)
        cb = g.cb.map(view)
        cr = g.cr.map(view)
        chromaStepX = g.stepX
        chromaStepY = g.stepY
        self.format = format
    }
}

extension FramePixels {
    init(luma: PlaneView, cb: PlaneView?, cr: PlaneView?, chromaStepX: Int, chromaStepY: Int, scale: Int, format: FrameFormat) {
        self.luma = luma; self.cb = cb; self.cr = cr
        self.chromaStepX = chromaStepX; self.chromaStepY = chromaStepY
        self.scale = scale; self.format = format
    }
}

/// Where each plane of a YUV format lives, checked against the buffer's capacity.
struct PlaneGeometries {
    struct Plane { var offset: Int; var width: Int; var height: Int; var bytesPerRow: Int; var stride: Int }
    var luma: Plane
    var cb: Plane?
    var cr: Plane?
    var stepX = 1
    var stepY = 1

    init?(_ f: FrameFormat, capacity: Int) {
        let w = f.width, h = f.height, cw = (w + 1) / 2, ch = (h + 1) / 2
        switch f.pixelFormat {
        case .yuyv, .uyvy:
            let y0 = f.pixelFormat == .yuyv ? 0 : 1, c0 = f.pixelFormat == .yuyv ? 1 : 0
            luma = Plane(offset: y0, width: w, height: h, bytesPerRow: f.bytesPerRow, stride: 2)
            cb = Plane(offset: c0, width: w / 2, height: h, bytesPerRow: f.bytesPerRow, stride: 4)
            cr = Plane(offset: c0 + 2, width: w / 2, height: h, bytesPerRow: f.bytesPerRow, stride: 4)
            stepX = 2
        case .nv12:
            let uv = f.plane(1)
            luma = Plane(offset: 0, width: w, height: h, bytesPerRow: f.bytesPerRow, stride: 1)
            cb = Plane(offset: uv.offset, width: cw, height: ch, bytesPerRow: uv.bytesPerRow, stride: 2)
            cr = Plane(offset: uv.offset + 1, width: cw, height: ch, bytesPerRow: uv.bytesPerRow, stride: 2)
            stepX = 2; stepY = 2
        case .i420, .yuv422p:
            let u = f.plane(1), v = f.plane(2)
            luma = Plane(offset: 0, width: w, height: h, bytesPerRow: f.bytesPerRow, stride: 1)
            cb = Plane(offset: u.offset, width: u.width, height: u.height, bytesPerRow: u.bytesPerRow, stride: 1)
            cr = Plane(offset: v.offset, width: v.width, height: v.height, bytesPerRow: v.bytesPerRow, stride: 1)
            stepX = 2; stepY = f.pixelFormat == .i420 ? 2 : 1
            _ = ch
        case .grey:
            luma = Plane(offset: 0, width: w, height: h, bytesPerRow: f.bytesPerRow, stride: 1)
        default:
            return nil
        }
        // Checked plane by plane: no array (this runs for every `frame.pixels`, on the hot path).
        func fits(_ p: Plane?) -> Bool {
            guard let p, p.width > 0, p.height > 0 else { return true }
            return p.offset + (p.height - 1) * p.bytesPerRow + (p.width - 1) * p.stride < capacity
        }
        guard fits(luma), fits(cb), fits(cr) else { return nil }
    }
}
