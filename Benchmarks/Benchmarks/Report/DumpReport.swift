// The raw dump on real pictures (`viewfinder-report --dump`): frames of the sim camera filming a
// photograph with sensor noise, held in memory, appended by `RawDumpWriter` to tmpfs; beside them
// the same camera's clean procedural scene (noise 0), at 1080p and 4K YUYV.
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ViewfinderKit

/// `count` frames of `device` (a paced=false sim string), copied into frames the caller owns.
func filmFrames(_ device: String, format: PixelFormat, width: Int, height: Int, count: Int) throws -> [Frame] {
    let sim = try SimCamera(deviceString: device + ",paced=false,frames=\(count),width=\(width),height=\(height),format=\(format.rawValue)")
    let cfg = try sim.configure(StreamRequest(pixelFormat: format, width: width, height: height, fps: 30, bufferCount: 4))
    try sim.start()
    defer { sim.stop() }
    var frames: [Frame] = []
    loop: while frames.count < count {
        switch try sim.nextSample(timeoutNanoseconds: 5_000_000_000) {
        case .sample(let s):
            let f = s.frame
            let copy = Frame(capacity: cfg.format.maxByteCount, format: f.format)
            copy.data.copyMemory(from: f.data, byteCount: f.bytesUsed)
            copy.bytesUsed = f.bytesUsed
            copy.sequence = f.sequence
            copy.timestamp = f.timestamp
            frames.append(copy)
        case .endOfStream: break loop
        case .timeout, .lost: continue
        }
    }
    return frames
}

/// Appends `frames` (cycled) `total` times to a new dump in /dev/shm: fps, CPU per frame, ratio and
/// how many frames the probe stored as they are.
func dumpRun(_ frames: [Frame], total: Int, acceleration: Int = 1, compression: RawDumpCompression = .auto) throws -> (fps: Double, cpuMs: Double, ratio: Double, stored: Int) {
    let path = "/dev/shm/vf-dumpreport-\(getpid()).vfdump"
    unlink(path)
    defer { unlink(path) }
    let writer = try RawDumpWriter(path: path, format: frames[0].format, interval: FrameInterval(fps: 30), acceleration: acceleration, compression: compression)
    let c0 = processCPUSeconds()
    let t0 = monotonicNanoseconds()
    for i in 0..<total {
        let f = frames[i % frames.count]
        f.sequence = UInt64(i)
        try writer.append(f)
    }
    try writer.close()
    let seconds = Double(monotonicNanoseconds() - t0) / 1e9
    return (Double(total) / seconds, (processCPUSeconds() - c0) * 1000 / Double(total),
            Double(writer.rawBytes) / Double(max(writer.bytesWritten, 1)), writer.framesStoredByProbe)
}

func runDumpReport(quick: Bool) throws {
    let runs = quick ? 3 : 5
    let photos = fetchPhotos() ?? []
    let photo = photos.first
    print("== Raw dump to tmpfs, YUYV, frames held in memory (medians of \(runs) runs, min–max)")
    if photo == nil { print("  (no photograph: the real-picture rows are skipped)") }
    print("   (auto, lz4 and none interleaved on the same frames; auto: packed 4:2:2 split into Y, U, V planes band by band and compressed as LZ4 chunks on \(min(4, ProcessInfo.processInfo.activeProcessorCount)) threads, luma at acceleration 64, chroma at 32; chunks a probe finds LZ4 would shrink by < 10 % are stored as they are)")
    for (w, h) in [(1920, 1080), (3840, 2160)] {
        let n = w > 2000 ? 8 : 24
        let total = quick ? (w > 2000 ? 60 : 150) : (w > 2000 ? 120 : 300)
        var inputs: [(String, String)] = [("clean procedural scene (noise 0)", "sim:noise=0,seed=3")]
        for p in photos.prefix(2).reversed() {
            let name = (p as NSString).lastPathComponent.components(separatedBy: "_by_").first ?? p
            inputs.insert(("photograph \(name) + sensor noise 0.5", "sim:scene=\(p),noise=0.5,seed=3,shake=2"), at: 0)
        }
        for (label, device) in inputs {
            let frames = try filmFrames(device, format: .yuyv, width: w, height: h, count: n)
            // The modes interleaved, run by run, on the same frames.
            var fps: [RawDumpCompression: [Double]] = [:], cpu: [RawDumpCompression: [Double]] = [:]
            var ratio: [RawDumpCompression: Double] = [:], stored: [RawDumpCompression: Int] = [:]
            for _ in 0..<runs {
                for c in RawDumpCompression.allCases {
                    let r = try dumpRun(frames, total: total, compression: c)
                    fps[c, default: []].append(r.fps); cpu[c, default: []].append(r.cpuMs); ratio[c] = r.ratio; stored[c] = r.stored
                }
            }
            for c in RawDumpCompression.allCases {
                row("\(w)x\(h) \(label), \(c)", "\(Spread(values: fps[c] ?? [])) fps",
                    String(format: "CPU %@ ms/frame, ratio %.2f, %d of %d frames stored as they are", Spread(values: cpu[c] ?? []).description, ratio[c] ?? 0, stored[c] ?? 0, total)
                    + (w == 1920 && label.hasPrefix("photo") && c == .auto ? " (target ≥ 300 fps)" : ""))
            }
        }
    }
}
