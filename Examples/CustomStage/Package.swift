// swift-tools-version: 6.1
// A user's own package that adds a stage to Viewfinder: the stage is one file in MyStages, and
// the StageRegistryPlugin registers it (as `StageRegistry.myStages`).
//
//   swift run custom-stage-demo
//   swift run my-viewfinder run --device sim --stages negative --metadata m.jsonl
//   swift test
import Foundation
import PackageDescription

/// A path dependency is identified by its folder's name; a real user would depend on the URL.
let viewfinder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "CustomStage",
    platforms: [.macOS(.v15)],
    dependencies: [.package(path: "../..")],
    targets: [
        .target(
            name: "MyStages",
            dependencies: [.product(name: "Viewfinder", package: viewfinder)],
            plugins: [.plugin(name: "StageRegistryPlugin", package: viewfinder)]
        ),
        .executableTarget(
            name: "custom-stage-demo",
            dependencies: ["MyStages", .product(name: "ViewfinderKit", package: viewfinder)]
        ),
        // The whole `viewfinder` command line, with the user's stages known by name.
        .executableTarget(
            name: "my-viewfinder",
            dependencies: ["MyStages", .product(name: "ViewfinderKit", package: viewfinder), .product(name: "ViewfinderCommandLine", package: viewfinder)]
        ),
        // "Writing a stage", Step 8: the stage's own test.
        .testTarget(name: "MyStagesTests", dependencies: ["MyStages", .product(name: "Viewfinder", package: viewfinder)]),
    ]
)
