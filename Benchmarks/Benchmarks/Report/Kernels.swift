import Foundation
import StageTiming
import ViewfinderKit

/// `--kernels`: the cost of each hot kernel at 1920x1080, GREY and YUYV, with the machine it ran on.
func reportKernels(quick: Bool) throws {
    print("== Kernels at 1920x1080: median thread CPU time per call over \(quick ? 3 : 7) rounds [fastest .. slowest round]")
    print("machine: \(cpuModel()), \(ProcessInfo.processInfo.activeProcessorCount) cores, \(machineArchitecture())")
    for pf in [PixelFormat.grey, .yuyv] {
        for f in try KernelTimings.run(width: 1920, height: 1080, pixelFormat: pf, repeats: quick ? 3 : 7, scale: quick ? 4 : 1) {
            print("  \(f)")
        }
    }
}

/// The CPU's model name from /proc/cpuinfo (Linux), or "unknown CPU".
func cpuModel() -> String {
    guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown CPU" }
    for line in text.split(separator: "\n") where line.hasPrefix("model name") || line.hasPrefix("Model") {
        if let v = line.split(separator: ":", maxSplits: 1).last { return v.trimmingCharacters(in: .whitespaces) }
    }
    return "unknown CPU"
}

func machineArchitecture() -> String {
    #if arch(x86_64)
    return "x86_64"
    #elseif arch(arm64)
    return "arm64"
    #else
    return "other architecture"
    #endif
}
