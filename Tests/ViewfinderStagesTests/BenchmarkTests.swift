import Testing
import Foundation
import Viewfinder
@testable import ViewfinderStages

@Suite("Kernel timings (VF_STAGE_BENCH=1, release build)", .serialized)
struct BenchmarkTests {
    /// Prints the kernel timings at 1920x1080; run in release:
    /// `swift build -c release --build-tests && VF_STAGE_BENCH=1 .build/release/ViewfinderPackageTests.xctest --testing-library swift-testing --filter BenchmarkTests`.
    /// Asserts only that every kernel ran and produced a time, never a speed.
    @Test("1080p kernel timings", .serialized, .enabled(if: ProcessInfo.processInfo.environment["VF_STAGE_BENCH"] != nil), arguments: [PixelFormat.grey, .yuyv, .nv12])
    func timings(_ pf: PixelFormat) {
        let results = StageBenchmarks.run(width: 1920, height: 1080, pixelFormat: pf, iterations: 40)
        for r in results { print("[stage-bench] \(r)") }
        #expect(results.count == 10)
        #expect(results.allSatisfy { $0.milliseconds > 0 && $0.milliseconds.isFinite })
    }
}
