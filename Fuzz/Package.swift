// swift-tools-version: 6.1
// Coverage-guided fuzz targets (libFuzzer) for Viewfinder's parsers of outside input, in a
// sub-package so that the main package needs no unsafe flags. Built and run by scripts/fuzz.sh:
//
//   swift build --package-path Fuzz -c debug -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library --product FuzzY4M
//   Fuzz/.build/debug/FuzzY4M -max_total_time=20 Fuzz/Corpus/FuzzY4M
import Foundation
import PackageDescription

/// A path dependency is identified by its folder's name, which differs between clones.
let viewfinder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "ViewfinderFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [.package(path: "../")],
    targets: [
        .target(name: "CLibFuzzer"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer"]),
        fuzzTarget("FuzzY4M"),
        fuzzTarget("FuzzDump"),
        fuzzTarget("FuzzMJPEG"),
        fuzzTarget("FuzzPipeline"),
        fuzzTarget("FuzzMetadata"),
        fuzzTarget("FuzzAudio"),
    ]
)

/// One libFuzzer executable (its `@main` calls `FuzzDriver.run`), linked with libFuzzer.
func fuzzTarget(_ name: String) -> Target {
    .executableTarget(
        name: name,
        dependencies: ["FuzzSupport", .product(name: "ViewfinderKit", package: viewfinder)],
        swiftSettings: [.unsafeFlags(["-sanitize=fuzzer,address"])],
        linkerSettings: [.unsafeFlags(["-sanitize=fuzzer,address"])]
    )
}
