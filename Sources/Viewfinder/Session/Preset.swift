/// Session presets (AVFoundation's `AVCaptureSession.Preset`), resolved against what the device offers.
public enum SessionPreset: String, Sendable, Codable, CaseIterable {
    /// The device's largest picture, for stills.
    case photo
    /// The best video the device does, up to 1920x1080 at 24 fps or more.
    case high
    /// Around 1280x720 (the largest size up to it).
    case medium
    /// Around 640x480 (the smallest size of at least 320x240).
    case low
    case vga640x480 = "640x480"
    case hd1280x720 = "1280x720"
    case hd1920x1080 = "1920x1080"
    case hd4K3840x2160 = "3840x2160"
    /// Keep the device's active format (or the one set with `setActiveFormat`).
    case inputPriority

    /// Preference among pixel formats for the same size: uncompressed first (no decode), MJPEG last.
    static let formatPreference: [PixelFormat] = [.yuyv, .nv12, .uyvy, .i420, .yuv422p, .grey, .rgb24, .mjpeg]

    /// What the preset resolves to on a device with `formats`; nil if it cannot be done.
    public func resolve(formats: [FormatDescription], active: StreamConfiguration?, requested: StreamRequest?) -> StreamRequest? {
        let candidates: [(PixelFormat, Int, Int, [FrameInterval])] = formats.flatMap { f -> [(PixelFormat, Int, Int, [FrameInterval])] in
            guard let pf = f.pixelFormat else { return [] }
            return f.sizes.flatMap { s -> [(PixelFormat, Int, Int, [FrameInterval])] in
                switch s {
                case .discrete(let w, let h, let i): return [(pf, w, h, i)]
                case .stepwise:
                    return [(640, 480), (1280, 720), (1920, 1080), (3840, 2160), s.maxSize]
                        .filter { s.contains(width: $0.0, height: $0.1) }
                        .map { (pf, $0.0, $0.1, s.intervals) }
                }
            }
        }
        func best(_ pick: [(PixelFormat, Int, Int, [FrameInterval])], fpsAtLeast: Double? = nil) -> StreamRequest? {
            let sorted = pick.sorted { a, b in
                let ia = SessionPreset.formatPreference.firstIndex(of: a.0) ?? 99
                let ib = SessionPreset.formatPreference.firstIndex(of: b.0) ?? 99
                return ia < ib
            }
            guard let c = sorted.first else { return nil }
            let maxFps = c.3.map(\.fps).max()
            return StreamRequest(pixelFormat: c.0, width: c.1, height: c.2, fps: fpsAtLeast.flatMap { f in c.3.map(\.fps).filter { $0 >= f }.min() } ?? maxFps.map { min($0, 30) })
        }
        func exact(_ w: Int, _ h: Int) -> StreamRequest? { best(candidates.filter { $0.1 == w && $0.2 == h }) }
        func largest(_ pool: [(PixelFormat, Int, Int, [FrameInterval])]) -> StreamRequest? {
            guard let area = pool.map({ $0.1 * $0.2 }).max() else { return nil }
            return best(pool.filter { $0.1 * $0.2 == area })
        }
        switch self {
        case .photo: return largest(candidates)
        case .high:
            let fast = candidates.filter { $0.1 * $0.2 <= 1920 * 1080 && ($0.3.isEmpty || $0.3.contains { $0.fps >= 24 }) }
            return largest(fast.isEmpty ? candidates : fast)
        case .medium: return largest(candidates.filter { $0.1 <= 1280 && $0.2 <= 720 })
        case .low:
            let pool = candidates.filter { $0.1 >= 320 && $0.2 >= 240 && $0.1 <= 640 && $0.2 <= 480 }
            guard let area = pool.map({ $0.1 * $0.2 }).min() else { return nil }
            return best(pool.filter { $0.1 * $0.2 == area })
        case .vga640x480: return exact(640, 480)
        case .hd1280x720: return exact(1280, 720)
        case .hd1920x1080: return exact(1920, 1080)
        case .hd4K3840x2160: return exact(3840, 2160)
        case .inputPriority:
            if let requested { return requested }
            if let a = active {
                return StreamRequest(pixelFormat: a.format.pixelFormat, width: a.format.width, height: a.format.height, fps: a.interval.fps)
            }
            return SessionPreset.high.resolve(formats: formats, active: nil, requested: nil)
        }
    }
}
