import Testing
import Foundation
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// A provider with no control stages: the session still runs the zoom (optical here).
struct ZoomOnlyProvider: DeviceControlStageProvider {
    func controlStages(for settings: DeviceSettings, device: CaptureDevice, sensorPoint: @Sendable (NormalizedPoint) -> NormalizedPoint) throws -> [StageSpec] { [] }
}

/// Optical zoom through `zoom_absolute`, checked in the fake kernel's record of writes.
@Suite struct ZoomTests {
    func zoomKernel() -> FakeV4L2Kernel {
        var spec = FakeV4L2Kernel.DeviceSpec.webcam()
        spec.controls.append(FakeV4L2Kernel.DeviceSpec.zoomControl)
        let k = makeKernel([spec])
        k.recordsControlWrites = true
        return k
    }

    @Test func factorsMapOntoZoomAbsolute() throws {
        let kernel = zoomKernel()
        let device = CaptureDevice(source: try makeCamera(kernel))
        #expect(device.hasOpticalZoom)
        #expect(device.minAvailableVideoZoomFactor == 1 && device.maxAvailableVideoZoomFactor == 5)
        #expect(device.zoomControlValue(forFactor: 1) == 100 && device.zoomControlValue(forFactor: 2.5) == 250 && device.zoomControlValue(forFactor: 5) == 500)
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        #expect(throws: SessionError.invalidConfiguration(reason: "zoom factor 6.0 is outside 1.0...5.0")) { try device.setVideoZoomFactor(6) }
        #expect(throws: SessionError.invalidConfiguration(reason: "zoom factor 0.5 is outside 1.0...5.0")) { try device.setVideoZoomFactor(0.5) }
        #expect(throws: SessionError.invalidConfiguration(reason: "zoom ramp rate 0.0 must be positive")) { try device.ramp(toVideoZoomFactor: 2, withRate: 0) }
        // Optical zoom works on MJPEG too (nothing to resample).
        try device.setVideoZoomFactor(3)
    }

    @Test func aRunningSessionWritesTheZoomAndRampsIt() throws {
        let kernel = zoomKernel()
        kernel.autoProduce = true
        let device = CaptureDevice(source: try makeCamera(kernel))
        let session = CaptureSession(controlStages: ZoomOnlyProvider(), logger: quietLogger)
        try session.addInput(CaptureDeviceInput(device: device))
        try session.addOutput(NullConsumer())
        try session.setSessionPreset(.inputPriority)
        try device.configure { $0.activeFormat = StreamRequest(pixelFormat: .yuyv, width: 320, height: 240, fps: 30) }
        try session.startRunning()
        defer { session.stopRunning() }
        func zoomWrites() -> [Int64] { kernel.controlWrites().filter { $0.id == V4L2.cidZoomAbsolute }.map(\.value) }
        func waitFor(_ done: () -> Bool) -> Bool {
            let deadline = Date().addingTimeInterval(10)
            while !done() { if Date() > deadline { return false }; usleep(2000) }
            return true
        }
        // The first frame puts the device at the session's factor (1: 100), whatever zoom
        // another program left it at; only then is the zoom changed (in CI, under load, the first
        // frame once came after the change and the test saw [100, 200]).
        #expect(waitFor { zoomWrites() == [100] })
        kernel.clearControlWrites()
        try device.lockForConfiguration()
        try device.setVideoZoomFactor(2)
        device.unlockForConfiguration()
        #expect(waitFor { kernel.controlValue(V4L2.cidZoomAbsolute) == 200 })
        #expect(zoomWrites() == [200]) // one jump, one write
        // A ramp to 4 at 2 powers of two per second: one doubling, 0.5 s = 15 frames at 30 fps.
        kernel.clearControlWrites()
        try device.lockForConfiguration()
        try device.ramp(toVideoZoomFactor: 4, withRate: 2)
        device.unlockForConfiguration()
        #expect(waitFor { kernel.controlValue(V4L2.cidZoomAbsolute) == 400 })
        let w = zoomWrites()
        #expect(w.last == 400 && w == w.sorted() && Set(w).count == w.count, "ramp writes \(w)")
        // The ramp goes by the frames' capture times (0.5 s; the fake kernel's frames come faster
        // than 30 fps): one write per drain of the control queue, each a new value on the way up.
        #expect((2...200).contains(w.count), "the ramp took \(w.count) writes: \(w)")
        // The value reads 400 from 3.995× on: the ramp lands on 4 within a frame or two after.
        #expect(waitFor { abs(device.videoZoomFactor - 4) < 1e-9 && !device.isRampingVideoZoom })
    }
}
