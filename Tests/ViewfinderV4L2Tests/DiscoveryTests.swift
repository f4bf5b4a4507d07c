import Testing
import Foundation
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// Discovery against the fake kernel: capture nodes only, the whole format tree, controls with
/// their standard meaning, stable identifiers, rendering and JSON.
@Suite struct DiscoveryTests {
    let kernel = makeKernel([.webcam(), .metadataNode()])

    @Test func findsCaptureNodesOnly() {
        let devices = V4L2Provider(syscalls: kernel, logger: quietLogger).discover()
        #expect(devices.map(\.id) == ["/dev/video0"])
        let d = devices[0]
        #expect(d.name == "Fake Webcam")
        #expect(d.driver == "fakecam")
        #expect(d.bus == "usb-0000:00:14.0-1")
        #expect(d.isLive)
        #expect(Set(d.stableIDs) == ["/dev/v4l/by-id/usb-Fake_Webcam-video-index0", "/dev/v4l/by-path/pci-0000:00:14.0-usb-0:1:1.0-video-index0"])
    }

    @Test func formatTree() throws {
        let d = try #require(V4L2Provider(syscalls: kernel, logger: quietLogger).discover().first)
        #expect(d.formats.map { fourCCString($0.fourcc) } == ["YUYV", "MJPG", "NV12", "GREY", "BA81"])
        #expect(d.formats.map(\.pixelFormat) == [.yuyv, .mjpeg, .nv12, .grey, .sbggr8])
        #expect(d.formats[1].compressed && !d.formats[0].compressed)
        let yuyv = d.formats[0]
        #expect(yuyv.sizes.count == 3)
        #expect(yuyv.sizes[0] == .discrete(width: 640, height: 480, intervals: [FrameInterval(numerator: 1, denominator: 30), FrameInterval(numerator: 1, denominator: 15)]))
        #expect(d.formats[2].sizes == [.stepwise(minWidth: 16, maxWidth: 1920, stepWidth: 16, minHeight: 16, maxHeight: 1080, stepHeight: 8,
                                                 intervals: [FrameInterval(numerator: 1, denominator: 30), FrameInterval(numerator: 1, denominator: 15)])])
    }

    @Test func controlsMapOntoStandardNames() throws {
        let d = try #require(V4L2Provider(syscalls: kernel, logger: quietLogger).discover().first)
        // Class controls ("User Controls") are not listed; everything else is, in id order.
        #expect(!d.controls.contains { $0.name == "user_controls" || $0.name == "camera_controls" })
        #expect(d.controls.count == 13)
        // The default device has every standard control but the flash and zoom ones (a webcam
        // has neither; `TorchFlashTests` and `ZoomTests` give the fake device those).
        let flashAndZoom: Set<StandardControl> = [.flashLEDMode, .flashStrobe, .flashStrobeStop, .flashStrobeSource, .flashIntensity, .torchIntensity, .flashFault, .zoomAbsolute]
        #expect(Set(d.controls.compactMap(\.standard)) == Set(StandardControl.allCases).subtracting(flashAndZoom))
        let plf = try #require(d.controls.first { $0.standard == .powerLineFrequency })
        #expect(plf.name == "power_line_frequency")
        #expect(plf.kind == .menu)
        #expect(plf.menu == [0: "Disabled", 1: "50 Hz", 2: "60 Hz"])
        let ae = try #require(d.controls.first { $0.standard == .exposureAuto })
        #expect(ae.name == "auto_exposure")
        #expect(ae.menu == [1: "Manual Mode", 3: "Aperture Priority Mode"]) // gaps in a menu are skipped
        let et = try #require(d.controls.first { $0.standard == .exposureTime })
        #expect(et.name == "exposure_time_absolute")
        #expect(et.flags.contains("inactive"))
        #expect(d.controls.first { $0.standard == .whiteBalanceAuto }?.name == "white_balance_automatic")
        #expect(d.controls.first { $0.standard == .focusAuto }?.name == "focus_automatic_continuous")
        let rate = try #require(d.controls.first { $0.name == "pixel_rate" })
        #expect(rate.kind == .integer64 && rate.flags.contains("read-only") && rate.maximum == 1 << 40)
    }

    @Test func rendersLikeV4L2Ctl() throws {
        let d = try #require(V4L2Provider(syscalls: kernel, logger: quietLogger).discover().first)
        let text = renderFormatTree(d)
        #expect(text.contains("ioctl: VIDIOC_ENUM_FMT"))
        #expect(text.contains("[0]: 'YUYV' (YUYV 4:2:2) [engine: YUYV]"))
        #expect(text.contains("[1]: 'MJPG' (Motion-JPEG, compressed)"))
        #expect(text.contains("\t\tSize: Discrete 640x480\n\t\t\tInterval: Discrete 0.033s (30.000 fps)\n\t\t\tInterval: Discrete 0.067s (15.000 fps)"))
        #expect(text.contains("Size: Stepwise 16x16 - 1920x1080 with step 16/8"))
        #expect(text.contains("'BA81' (8-bit Bayer BGBG/GRGR) [engine: SBGGR8]"))
        let ctl = renderControls(d.controls)
        #expect(ctl.contains("power_line_frequency 0x00980918 (menu) : min=0 max=2 default=1"))
        #expect(ctl.contains("1: 50 Hz"))
    }

    @Test func deviceInfoRoundTripsThroughJSON() throws {
        let d = try #require(V4L2Provider(syscalls: kernel, logger: quietLogger).discover().first)
        let data = try JSONEncoder().encode(d)
        #expect(try JSONDecoder().decode(DeviceInfo.self, from: data) == d)
    }

    @Test func providerHandlesDevicePaths() throws {
        let p = V4L2Provider(syscalls: kernel, logger: quietLogger)
        #expect(p.handles("/dev/video0") && p.handles("v4l2:/dev/video3") && p.handles("/dev/v4l/by-id/usb-x"))
        #expect(!p.handles("sim") && !p.handles("dump:x.lz4"))
        let s = try p.open("v4l2:/dev/video0")
        #expect(s.info.id == "/dev/video0")
        (s as? V4L2Camera)?.close()
    }

    @Test func refusesMissingAndNonCaptureNodes() {
        #expect(throws: DeviceError.unknownDevice("/dev/video7", reason: "no such device node")) {
            try makeCamera(kernel, path: "/dev/video7")
        }
        do {
            _ = try makeCamera(kernel, path: "/dev/video1")
            Issue.record("a metadata node opened as a camera")
        } catch let DeviceError.unknownDevice(path, reason) {
            #expect(path == "/dev/video1")
            #expect(reason.contains("metadata"))
        } catch { Issue.record("unexpected \(error)") }
    }

    @Test func controlNamesFollowV4L2Ctl() {
        #expect(controlVariableName("White Balance, Automatic") == "white_balance_automatic")
        #expect(controlVariableName("Exposure Time, Absolute") == "exposure_time_absolute")
        #expect(controlVariableName("  Gain ") == "gain")
        #expect(controlVariableName("Focus, Automatic Continuous") == "focus_automatic_continuous")
    }
}
