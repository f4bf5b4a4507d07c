// swift-tools-version: 6.1
// Viewfinder's benchmarks, in a sub-package (as SwiftNIO does) so that building and testing the
// main package stays fast.
//
//   cd Benchmarks && swift package benchmark            # package-benchmark suites (Engine)
//   cd Benchmarks && swift run -c release viewfinder-report   # side-by-side figures with the peers
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
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
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
            ],
            path: "Benchmarks/Stages",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "viewfinder-report",
            dependencies: [
                .product(name: "ViewfinderKit", package: viewfinder),
                .product(name: "ViewfinderTestSupport", package: viewfinder),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/Report"
        ),
    ]
)
