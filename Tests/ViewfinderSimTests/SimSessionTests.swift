import Testing
import Foundation
@testable import Viewfinder
@testable import ViewfinderSim

/// A stage the injected control provider hands the session as a type: counts frames.
final class CountingControlStage: Stage {
    static let name = "counting_control"
    static let summary = "Counts the frames it sees."
    static let frames = LockedBox(0)
    init(options: NoOptions) {}
    func process(_ frame: Frame) -> StageVerdict {
        CountingControlStage.frames.withLock { $0 += 1 }
        return .forward
    }
}

@Suite(.serialized) struct SimSessionTests {
    /// The session asks its injected provider for the control stages: the core names none.
    @Test func controlStagesComeFromTheInjectedProvider() throws {
        struct Provider: DeviceControlStageProvider {
            let calls = LockedBox<[ExposureMode]>([])
            func controlStages(for settings: DeviceSettings, device: CaptureDevice, sensorPoint: @Sendable (NormalizedPoint) -> NormalizedPoint) throws -> [StageSpec] {
                calls.withLock { $0.append(settings.exposureMode) }
                return settings.exposureMode == .locked ? [] : [.stage(CountingControlStage.self)]
            }
        }
        let provider = Provider()
        let device = CaptureDevice(source: try SimCamera(deviceString: "sim:width=64,height=64,paced=false,frames=12"))
        let session = CaptureSession(controlStages: provider)
        try session.addInput(CaptureDeviceInput(device: device))
        try session.addOutput(NullConsumer())
        try session.setSessionPreset(.inputPriority)
        CountingControlStage.frames.withLock { $0 = 0 }
        try device.configure { $0.exposureMode = .continuous }
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        #expect(provider.calls.withLock { $0 } == [.continuous])
        #expect(CountingControlStage.frames.withLock { $0 } == 12)
        #expect(session.statistics?.stageNames == ["device_controls"])
    }
}

@Suite struct SimOptionTableTests {
    @Test func badValuesAreRefusedLikeEveryOtherOption() {
        #expect(throws: DeviceError.invalidDeviceOption(device: "sim:fps=0", option: "fps", reason: "0 is outside 0.1...240")) {
            try SimOptions(deviceString: "sim:fps=0")
        }
        #expect(throws: DeviceError.invalidDeviceOption(device: "sim:width=641", option: "width", reason: "expected an even width, got '641'")) {
            try SimOptions(deviceString: "sim:width=641")
        }
        #expect(throws: DeviceError.invalidDeviceOption(device: "sim:flicker=55", option: "flicker", reason: "expected 0, 50 or 60 (Hz), got '55'")) {
            try SimOptions(deviceString: "sim:flicker=55")
        }
        #expect(throws: DeviceError.invalidDeviceOption(device: "sim:width=640,width=320", option: "width", reason: "given twice")) {
            try SimOptions(deviceString: "sim:width=640,width=320")
        }
    }

    @Test func valuesParseFromTextAndJSONAlike() throws {
        let o = try SimOptions(deviceString: "sim:width=320,height=240,fps=12.5,format=nv12,paced=false,seed=7,scene=/tmp/a/b.jpg,flicker=50")
        #expect(o.width == 320 && o.height == 240 && o.fps == 12.5 && o.format == .nv12 && !o.paced && o.seed == 7 && o.flicker == 50)
        #expect(o.scene == "/tmp/a/b.jpg")
        let j = try SimOptions.decode(["width": .number(320), "paced": .bool(false), "seed": .number(7)], device: "sim")
        #expect(j.width == 320 && !j.paced && j.seed == 7)
        #expect(try SimOptions.decode(o.encoded(), device: "sim") == o)
    }

    @Test func everySimOptionIsDocumented() {
        let kinds = DeviceDirectory(providers: [SimProvider(), PatternProvider()]).kinds
        #expect(kinds.map(\.syntax) == ["sim[:key=value,…]", "pattern[:key=value,…]"])
        #expect(kinds[0].options.map(\.name) == SimOptions.names)
        for o in kinds[0].options { #expect(!o.summary.isEmpty && !o.defaultValue.isEmpty, "\(o.name)") }
        #expect(kinds[0].options.first { $0.name == "width" } == OptionDocumentation(name: "width", type: "integer", defaultValue: "1280", range: "64...7680", unit: "pixels", summary: "Output width (even)"))
    }
}
