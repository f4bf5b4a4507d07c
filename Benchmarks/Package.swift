// swift-tools-version: 6.1
// Viewfinder's benchmarks, in a sub-package (as SwiftNIO does) so that building and testing the
// main package stays fast.
//
//   cd Benchmarks && swift package benchmark            # package-benchmark suites (Engine)
//   cd Benchmarks && swift run -c release viewfinder-report   # side-by-side figures with the peers
//   cd Benchmarks && swift package benchmark thresholds check --target Allocations   # CI: 0 allocations per frame
//   cd Benchmarks && swift run -c release viewfinder-report --kernels   # per-kernel cost with spread
import Foundation
import PackageDescription

/// A path dependency is identified by its folder's name, which differs between clones.
let viewfinder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "ViewfinderBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../"),
        .package(url: "https://github.com/ordo-one/benchmark", exact: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
    ],
    targets: [
        // Timing harness of the stage kernels and the sim renderer (not part of the library).
        .target(
            name: "StageTiming",
            dependencies: [
                .product(name: "ViewfinderKit", package: viewfinder),
                .product(name: "ViewfinderTestSupport", package: viewfinder),
            ],
            path: "Benchmarks/StageTiming"
        ),
        .executableTarget(
            name: "Engine",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "ViewfinderKit", package: viewfinder),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            path: "Benchmarks/Engine",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "Stages",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "ViewfinderKit", package: viewfinder),
                "StageTiming",
            ],
            path: "Benchmarks/Stages",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "Allocations",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "ViewfinderKit", package: viewfinder),
                .product(name: "ViewfinderTestSupport", package: viewfinder),
            ],
            path: "Benchmarks/Allocations",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "viewfinder-report",
            dependencies: [
                .product(name: "ViewfinderKit", package: viewfinder),
                .product(name: "ViewfinderTestSupport", package: viewfinder),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                "StageTiming",
            ],
            path: "Benchmarks/Report"
        ),
    ]
)
