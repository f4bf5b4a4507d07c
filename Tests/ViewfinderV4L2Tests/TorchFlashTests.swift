import Testing
import Foundation
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderSinks
import ViewfinderTestSupport

/// Torch and flash over V4L2's flash controls, checked in the fake kernel's record of writes.
@Suite struct TorchFlashTests {
    typealias W = FakeV4L2Kernel.ControlWrite

    func flashKernel() -> FakeV4L2Kernel {
        var spec = FakeV4L2Kernel.DeviceSpec.webcam()
        spec.controls += FakeV4L2Kernel.DeviceSpec.flashControls
        let k = makeKernel([spec])
        k.recordsControlWrites = true
        return k
    }

    @Test func torchOnWritesTheIntensityThenTheMode() throws {
        let kernel = flashKernel()
        let device = CaptureDevice(source: try makeCamera(kernel))
        #expect(device.hasTorch && device.hasFlash && device.isTorchAvailable && device.isFlashAvailable)
        #expect(device.torchMode == .off && device.torchLevel == 0 && !device.isTorchActive)
        try device.lockForConfiguration()
        // torch_intensity is 25…200 step 25: half of the range is 25 + 4 steps (87.5 mA rounds to 100).
        try device.setTorchModeOn(level: 0.5)
        #expect(kernel.controlWrites() == [W(V4L2.cidFlashTorchIntensity, 125), W(V4L2.cidFlashLEDMode, 2)])
        #expect(device.torchMode == .on && device.torchLevel == 0.5 && device.isTorchActive)
        kernel.clearControlWrites()
        try device.setTorchMode(.on)
        #expect(kernel.controlWrites() == [W(V4L2.cidFlashTorchIntensity, 200), W(V4L2.cidFlashLEDMode, 2)])
        kernel.clearControlWrites()
        try device.setTorchMode(.off)
        #expect(kernel.controlWrites() == [W(V4L2.cidFlashLEDMode, 0)])
        #expect(device.torchLevel == 0 && !device.isTorchActive)
        #expect(throws: SessionError.invalidConfiguration(reason: "torch level 0.0 is outside (0, 1]")) { try device.setTorchModeOn(level: 0) }
        #expect(throws: SessionError.invalidConfiguration(reason: "torch level 1.5 is outside (0, 1]")) { try device.setTorchModeOn(level: 1.5) }
        device.unlockForConfiguration()
        #expect(throws: SessionError.notLockedForConfiguration(device: "/dev/video0")) { try device.setTorchMode(.on) }
    }

    @Test func aDeviceWithoutFlashControlsSaysSo() throws {
        let kernel = makeKernel()
        kernel.recordsControlWrites = true
        let device = CaptureDevice(source: try makeCamera(kernel))
        #expect(!device.hasTorch && !device.hasFlash && !device.isTorchAvailable && !device.isTorchModeSupported(.on))
        try device.lockForConfiguration()
        defer { device.unlockForConfiguration() }
        #expect(throws: SessionError.unsupportedMode(device: "/dev/video0", mode: "torch on", reason: "it has no flash LED with a torch mode (led_mode)")) {
            try device.setTorchModeOn(level: 1)
        }
        #expect(throws: SessionError.self) { try device.setTorchMode(.auto) }
        // Off it always is: turning it off is no error and writes nothing (a ported app's
        // clean-up), as AVFoundation's flash modes offer `.off` on every device.
        #expect(device.isTorchModeSupported(.off))
        try device.setTorchMode(.off)
        #expect(throws: PhotoCaptureError.flashUnavailable("the device has no flash (led_mode with flash, strobe)")) { try DeviceFlash(device: device).fire() }
        #expect(DeviceFlash(device: device).supportedFlashModes == [.off])
        #expect(kernel.controlWrites().isEmpty)
    }

    @Test func faultsAreReadAndReported() throws {
        let kernel = flashKernel()
        let device = CaptureDevice(source: try makeCamera(kernel))
        let flash = DeviceFlash(device: device, level: 1)
        try flash.fire()
        #expect(kernel.controlWrites() == [W(V4L2.cidFlashLEDMode, 1), W(V4L2.cidFlashStrobeSource, 0), W(V4L2.cidFlashIntensity, 1000), W(V4L2.cidFlashStrobe, 1)])
        kernel.clearControlWrites()
        // The strobe ran too long and the LED got hot.
        kernel.setControlValue(V4L2.cidFlashFault, to: 0b110)
        let faults = flash.end()
        #expect(faults == [.timeout, .overTemperature])
        #expect(faults.description == "timeout, over-temperature")
        #expect(kernel.controlWrites() == [W(V4L2.cidFlashStrobeStop, 1), W(V4L2.cidFlashLEDMode, 0)])
        // While the driver reports a fault, neither torch nor flash is available, and firing says why.
        #expect(!device.isFlashAvailable && !device.isTorchAvailable)
        #expect(throws: PhotoCaptureError.flashUnavailable("the flash driver reports faults: timeout, over-temperature")) { try flash.fire() }
    }

    @Test func torchAutoFollowsTheMeteredScene() throws {
        let kernel = flashKernel()
        let cam = try makeCamera(kernel)
        let device = CaptureDevice(source: cam)
        try device.lockForConfiguration()
        try device.setTorchMode(.auto)
        device.unlockForConfiguration()
        #expect(kernel.controlWrites() == [W(V4L2.cidFlashTorchIntensity, 200), W(V4L2.cidFlashLEDMode, 0)])
        kernel.clearControlWrites()
        let q = ControlRequestQueue()
        // A scene 2 EV too dark for the exposure loop lights the torch (through the capture side's queue) …
        device.noteExposure(errorEV: 2, requests: q)
        #expect(device.isLowLightScene && device.isTorchActive && device.torchLevel == 1)
        #expect(q.apply(to: cam.v4l2Controls, afterFrame: 10) == 1)
        // … a converged loop keeps it lit, a scene too bright even then turns it off.
        device.noteExposure(errorEV: 0.1, requests: q)
        #expect(q.pending == 0 && device.isTorchActive)
        device.noteExposure(errorEV: -1.5, requests: q)
        #expect(q.apply(to: cam.v4l2Controls, afterFrame: 11) == 1)
        #expect(!device.isTorchActive && !device.isLowLightScene)
        #expect(kernel.controlWrites() == [W(V4L2.cidFlashLEDMode, 2), W(V4L2.cidFlashLEDMode, 0)])
    }

    /// A photo with flash on a running session: strobe before the frame, stop and restore after.
    @Test func aFlashPhotoStrobesAroundTheFrame() throws {
        let kernel = flashKernel()
        kernel.autoProduce = true
        let cam = try makeCamera(kernel)
        let device = CaptureDevice(source: cam)
        let session = CaptureSession(logger: quietLogger)
        try session.addInput(CaptureDeviceInput(device: device))
        let photo = PhotoOutput(logger: quietLogger)
        try session.addOutput(photo)
        try session.setSessionPreset(.inputPriority)
        #expect(photo.supportedFlashModes == [.off, .on, .auto])
        try session.startRunning()
        defer { session.stopRunning() }

        // Auto in a bright (unmetered) scene: no flash, nothing written.
        kernel.clearControlWrites()
        let plain = try photo.capturePhotos(settings: PhotoSettings(codec: .raw, flashMode: .auto))
        #expect(plain.first?.resolvedSettings.isFlashEnabled == false)
        #expect(kernel.controlWrites().isEmpty)

        // On: led_mode flash, software strobe, strobe; then stop and back to none.
        let lit = try photo.capturePhotos(settings: PhotoSettings(codec: .raw, flashMode: .on))
        #expect(lit.count == 1 && lit[0].resolvedSettings.isFlashEnabled && lit[0].resolvedSettings.flashFaults.isEmpty)
        #expect(kernel.controlWrites() == [W(V4L2.cidFlashLEDMode, 1), W(V4L2.cidFlashStrobeSource, 0), W(V4L2.cidFlashStrobe, 1),
                                           W(V4L2.cidFlashStrobeStop, 1), W(V4L2.cidFlashLEDMode, 0)])

        // Auto in a scene the exposure loop cannot brighten: the flash fires, and a lit torch comes back after.
        device.noteExposure(errorEV: 1.5, requests: nil)
        #expect(photo.isFlashScene)
        try device.lockForConfiguration()
        try device.setTorchModeOn(level: 1)
        device.unlockForConfiguration()
        kernel.clearControlWrites()
        let auto = try photo.capturePhotos(settings: PhotoSettings(codec: .raw, flashMode: .auto))
        #expect(auto.first?.resolvedSettings.isFlashEnabled == true)
        #expect(kernel.controlWrites().last == W(V4L2.cidFlashLEDMode, 2))
    }

    @Test func aFlashPhotoOnADeviceWithoutFlashIsRefused() throws {
        let kernel = makeKernel()
        kernel.autoProduce = true
        let session = CaptureSession(logger: quietLogger)
        try session.addInput(CaptureDeviceInput(device: CaptureDevice(source: try makeCamera(kernel))))
        let photo = PhotoOutput(logger: quietLogger)
        try session.addOutput(photo)
        try session.setSessionPreset(.inputPriority)
        #expect(photo.supportedFlashModes == [.off])
        try session.startRunning()
        defer { session.stopRunning() }
        #expect(throws: PhotoCaptureError.flashUnavailable("flash mode on is not among the supported [\"off\"]")) {
            try photo.capturePhotos(settings: PhotoSettings(codec: .raw, flashMode: .on))
        }
    }
}
