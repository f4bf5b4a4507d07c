import Testing
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// Controls: get/set through G/S_EXT_CTRLS, typed errors, standard names, control events.
@Suite struct ControlTests {
    let kernel = makeKernel()

    @Test func setAndReadBack() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        let c = cam.v4l2Controls
        try c.set("brightness", to: 10)
        #expect(kernel.controlValue(0x0098_0900) == 10)
        #expect(try c.value(of: "brightness") == 10)
        // Standard names work through the DeviceControlling extension.
        try c.set(.gain, to: 55)
        #expect(try c.value(of: .gain) == 55)
        try c.set(.powerLineFrequency, to: 2)
        #expect(kernel.controlValue(0x0098_0918) == 2)
        // 64-bit controls read through value64.
        #expect(try c.value(of: "pixel_rate") == 1 << 33)
        #expect(c.supports(.focusAbsolute))
        #expect(c.controlLatencyFrames > 0)
    }

    @Test func unknownControlNamesTheKnownOnes() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        do {
            try cam.v4l2Controls.set("zoom_absolute", to: 1)
            Issue.record("unknown control accepted")
        } catch let DeviceError.unknownControl(device, control, known) {
            #expect(device == "/dev/video0")
            #expect(control == "zoom_absolute")
            #expect(known.contains("brightness") && known.contains("auto_exposure"))
            #expect(DeviceError.unknownControl(device: device, control: control, known: known).description.contains("has no control 'zoom_absolute'"))
        }
    }

    @Test func outOfRangeStepAndMenuValuesAreRefused() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        let c = cam.v4l2Controls
        #expect(throws: DeviceError.controlOutOfRange(device: "/dev/video0", control: "brightness", value: 65, range: -64...64)) {
            try c.set("brightness", to: 65)
        }
        // Off the step grid (focus steps by 5).
        #expect(throws: DeviceError.controlOutOfRange(device: "/dev/video0", control: "focus_absolute", value: 7, range: 0...250)) {
            try c.set("focus_absolute", to: 7)
        }
        // 0 is inside min...max but not a menu item of this device.
        #expect(throws: DeviceError.controlOutOfRange(device: "/dev/video0", control: "auto_exposure", value: 0, range: 0...3)) {
            try c.set("auto_exposure", to: 0)
        }
        #expect(kernel.controlValue(0x0098_0900) == 0) // nothing reached the device
    }

    @Test func readOnlyControlIsAClearError() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        do {
            try cam.v4l2Controls.set("pixel_rate", to: 5)
            Issue.record("read-only control written")
        } catch let DeviceError.io(_, op, _, message) {
            #expect(op.contains("pixel_rate"))
            #expect(message.contains("read-only"))
        }
    }

    @Test func controlEventsUpdateFlags() throws {
        let cam = try makeCamera(kernel)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240))
        try cam.start()
        #expect(cam.v4l2Controls.descriptor(.exposureTime)?.flags.contains("inactive") == true)
        try cam.v4l2Controls.set(.exposureAuto, to: 1) // manual: exposure time becomes active
        // The capture thread reads the event (POLLPRI) while waiting for frames.
        _ = try cam.next(timeoutNanoseconds: 10_000_000)
        #expect(cam.v4l2Controls.descriptor(.exposureTime)?.flags.contains("inactive") == false)
        #expect(cam.counters.controlEvents >= 2)
        kernel.signalSourceChange()
        _ = try cam.next(timeoutNanoseconds: 10_000_000)
        #expect(cam.counters.sourceChanges == 1)
    }

    @Test func controlsFollowAReopen() throws {
        var options = V4L2Camera.Options()
        options.stallTimeoutSeconds = 0.01
        let cam = try makeCamera(kernel, options: options)
        defer { cam.close() }
        _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240))
        try cam.start()
        kernel.setStalled(true)
        while cam.counters.reopens == 0 { _ = try cam.next(timeoutNanoseconds: 15_000_000) }
        try cam.v4l2Controls.set("contrast", to: 40)
        #expect(kernel.controlValue(0x0098_0901) == 40)
    }
}
