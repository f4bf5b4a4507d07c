// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "Viewfinder",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Viewfinder", targets: ["Viewfinder"]),
        .library(name: "ViewfinderKit", targets: ["ViewfinderKit"]),
        // Test doubles and fixtures (a fake V4L2 kernel, …) for this package's tests and its
        // Benchmarks sub-package. Not part of ViewfinderKit.
        .library(name: "ViewfinderTestSupport", targets: ["ViewfinderTestSupport"]),
        .executable(name: "viewfinder", targets: ["ViewfinderCLI"]),
        .library(name: "ViewfinderCommandLine", targets: ["ViewfinderCommandLine"]),
        .plugin(name: "StageRegistryPlugin", targets: ["StageRegistryPlugin"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        // `swift package generate-documentation` (scripts/build-docs.sh); no target depends on it.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // The browser preview (`viewfinder preview`, target ViewfinderPreview) only: ViewfinderKit
        // never builds it. Its tests talk HTTP through a small client of their own
        // (Tests/ViewfinderPreviewTests/LoopbackHTTPClient.swift), not AsyncHTTPClient, whose TLS
        // stack (BoringSSL) cost every CI build minutes.
        // Trait ConfigurationSupport off (swift-configuration is not used here; one module less to
        // build), FullFoundation on as by default.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1", traits: ["FullFoundation"]),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // Hummingbird's own NIO (same URLs and versions): the preview's HTTP/1 channel puts a
        // handler before Hummingbird's codec that answers an HTTP/1.0 request as HTTP/1.0.
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.34.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        // C libraries, through pkg-config, with the Debian packages that provide them.
        .systemLibrary(name: "CV4L2", pkgConfig: "libv4l2", providers: [.apt(["libv4l-dev"])]),
        .systemLibrary(name: "CTurboJPEG", pkgConfig: "libturbojpeg", providers: [.apt(["libturbojpeg0-dev"])]),
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(name: "CLZ4", pkgConfig: "liblz4", providers: [.apt(["liblz4-dev"])]),
        // Linux futex wake/wait and a per-thread SIGPIPE block (glibc's syscall() is variadic).
        .systemLibrary(name: "CFutex"),

        // Hot loops in C: a portable build and an AVX2 build chosen at run time (no target-CPU flag).
        .target(name: "CViewfinderKernels"),
        // JPEG straight from packed 4:2:2 rows (libjpeg-turbo's raw-data interface, one 8-row strip
        // at a time): no full-frame planar copy before the encode. C because libjpeg reports errors
        // by longjmp.
        .target(name: "CViewfinderJPEG", dependencies: ["CViewfinderKernels"], linkerSettings: [.linkedLibrary("jpeg")]),

        // The engine: frames, pool, ring, stages, flow and the capture session. Links no codec.
        .target(
            name: "Viewfinder",
            dependencies: [.product(name: "Logging", package: "swift-log"), "CViewfinderKernels"]
        ),
        // The simulated camera (its scenes and MJPEG output use TurboJPEG).
        .target(
            name: "ViewfinderSim",
            dependencies: ["Viewfinder", "CTurboJPEG", "CViewfinderKernels"]
        ),
        // Built-in stages, registered by the build-tool plugin.
        .target(
            name: "ViewfinderStages",
            dependencies: ["Viewfinder", "CViewfinderKernels"],
            plugins: ["StageRegistryPlugin"]
        ),
        // Real cameras through V4L2.
        .target(
            name: "ViewfinderV4L2",
            dependencies: ["Viewfinder", "CV4L2", "CTurboJPEG"]
        ),
        // Sinks: JPEG stills, movie files, LZ4 raw dumps, frames to a pipe or a shared-memory ring.
        .target(
            name: "ViewfinderSinks",
            dependencies: ["Viewfinder", "CTurboJPEG", "CLZ4", "CFutex", "CViewfinderKernels", "CViewfinderJPEG"]
        ),
        // Sound capture through ALSA (the engine's audio types, clock and aligner are in Viewfinder).
        .target(
            name: "ViewfinderAudio",
            dependencies: ["Viewfinder", "CALSA"]
        ),
        // Everything together: device discovery over sim, V4L2 and dumps; the built-in stage registry.
        .target(
            name: "ViewfinderKit",
            dependencies: ["Viewfinder", "ViewfinderSim", "ViewfinderStages", "ViewfinderV4L2", "ViewfinderSinks", "ViewfinderAudio"]
        ),
        // `viewfinder bench`: camera timing, control latency from the pictures, stage time
        // distributions, the JSON report, the HTML report with SVG plots, baseline comparison.
        .target(
            name: "ViewfinderBench",
            dependencies: ["ViewfinderKit", .product(name: "Logging", package: "swift-log")]
        ),
        // Test doubles and fixtures; used by Tests/ and Benchmarks/, never by ViewfinderKit.
        .target(
            name: "ViewfinderTestSupport",
            dependencies: ["Viewfinder", "ViewfinderV4L2", "CV4L2"]
        ),
        // The browser preview: an HTTP server (MJPEG stream, live statistics over a WebSocket,
        // Prometheus metrics, controls) on a session. Only the CLI and its tests depend on it.
        .target(
            name: "ViewfinderPreview",
            dependencies: [
                "ViewfinderKit", "CTurboJPEG",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The `viewfinder` command line as a library: the `viewfinder` executable runs it with the
        // built-in stages, a user's own program with theirs added (`ViewfinderCommandLine.main(stages:)`).
        .target(
            name: "ViewfinderCommandLine",
            dependencies: [
                "ViewfinderKit", "ViewfinderPreview", "ViewfinderBench",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(name: "ViewfinderCLI", dependencies: ["ViewfinderCommandLine"]),

        // The soak test of issue 15 (scripts/soak.sh): the sim at 1080p through every stage into a
        // movie, a dump and a video data output, sampling memory, descriptors and threads.
        .executableTarget(name: "viewfinder-soak", dependencies: ["ViewfinderKit", "Viewfinder", "CViewfinderKernels"], path: "Examples/Soak"),

        // Static stage registration: the plugin scans a target's sources for stage types and the
        // generator writes the registry.
        .executableTarget(name: "StageRegistryGenerator"),
        .plugin(
            name: "StageRegistryPlugin",
            capability: .buildTool(),
            dependencies: ["StageRegistryGenerator"]
        ),

        .testTarget(name: "ViewfinderTests", dependencies: ["Viewfinder"]),
        .testTarget(name: "ViewfinderSimTests", dependencies: ["Viewfinder", "ViewfinderSim", "CTurboJPEG"]),
        .testTarget(name: "ViewfinderKitTests", dependencies: ["ViewfinderKit"]),
        .testTarget(name: "ViewfinderStagesTests", dependencies: ["Viewfinder", "ViewfinderSim", "ViewfinderStages", "ViewfinderV4L2", "ViewfinderTestSupport"]),
        .testTarget(name: "ViewfinderV4L2Tests", dependencies: ["Viewfinder", "ViewfinderV4L2", "ViewfinderStages", "ViewfinderSinks", "ViewfinderTestSupport", "CV4L2", "CTurboJPEG", "CViewfinderKernels"]),
        .testTarget(name: "ViewfinderSinksTests", dependencies: ["Viewfinder", "ViewfinderSim", "ViewfinderSinks", "ViewfinderStages", "ViewfinderV4L2", "ViewfinderTestSupport", "CTurboJPEG", "CLZ4", "CFutex", "CViewfinderKernels"]),
        .testTarget(name: "ViewfinderAudioTests", dependencies: ["ViewfinderKit", "ViewfinderAudio", "CALSA"]),
        .testTarget(name: "StageRegistryGeneratorTests", dependencies: ["StageRegistryGenerator"]),
        .testTarget(name: "ViewfinderCLITests", dependencies: ["ViewfinderCommandLine", "ViewfinderBench"]),
        .testTarget(name: "ViewfinderPreviewTests", dependencies: [
            "ViewfinderPreview", "ViewfinderKit", "CTurboJPEG",
        ]),
        .testTarget(name: "ViewfinderBenchTests", dependencies: ["ViewfinderBench", "ViewfinderKit"]),
    ]
)
