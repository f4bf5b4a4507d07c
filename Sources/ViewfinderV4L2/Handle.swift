#if canImport(Glibc)
import Glibc
#endif
import CV4L2
import Viewfinder

/// V4L2 ABI constants, spelled out with the types the backend uses (the C macros import with
/// assorted integer types). Values are from `linux/videodev2.h` and never change (kernel ABI).
package enum V4L2 {
    package static let bufTypeVideoCapture: UInt32 = 1
    package static let memoryMMAP: UInt32 = 1
    package static let fieldNone: UInt32 = 1
    package static let fieldAny: UInt32 = 0

    package static let capVideoCapture: UInt32 = 0x0000_0001
    package static let capVideoOutput: UInt32 = 0x0000_0002
    package static let capVideoCaptureMPlane: UInt32 = 0x0000_1000
    package static let capMetaCapture: UInt32 = 0x0080_0000
    package static let capStreaming: UInt32 = 0x0400_0000
    package static let capDeviceCaps: UInt32 = 0x8000_0000

    package static let fmtFlagCompressed: UInt32 = 0x0001

    package static let frmsizeDiscrete: UInt32 = 1
    package static let frmsizeContinuous: UInt32 = 2
    package static let frmsizeStepwise: UInt32 = 3
    package static let frmivalDiscrete: UInt32 = 1

    package static let bufFlagMapped: UInt32 = 0x0000_0001
    package static let bufFlagQueued: UInt32 = 0x0000_0002
    package static let bufFlagDone: UInt32 = 0x0000_0004
    package static let bufFlagError: UInt32 = 0x0000_0040
    package static let bufFlagLast: UInt32 = 0x0010_0000
    package static let bufFlagTimestampMask: UInt32 = 0x0000_e000
    package static let bufFlagTimestampUnknown: UInt32 = 0x0000_0000
    package static let bufFlagTimestampMonotonic: UInt32 = 0x0000_2000
    package static let bufFlagTimestampCopy: UInt32 = 0x0000_4000

    package static let ctrlFlagDisabled: UInt32 = 0x0001
    package static let ctrlFlagGrabbed: UInt32 = 0x0002
    package static let ctrlFlagReadOnly: UInt32 = 0x0004
    package static let ctrlFlagInactive: UInt32 = 0x0010
    package static let ctrlFlagWriteOnly: UInt32 = 0x0040
    package static let ctrlFlagVolatile: UInt32 = 0x0080
    package static let ctrlFlagNextCtrl: UInt32 = 0x8000_0000
    package static let ctrlFlagNextCompound: UInt32 = 0x4000_0000
    package static let ctrlWhichCurVal: UInt32 = 0

    package static let ctrlTypeInteger: UInt32 = 1
    package static let ctrlTypeBoolean: UInt32 = 2
    package static let ctrlTypeMenu: UInt32 = 3
    package static let ctrlTypeButton: UInt32 = 4
    package static let ctrlTypeInteger64: UInt32 = 5
    package static let ctrlTypeClass: UInt32 = 6
    package static let ctrlTypeString: UInt32 = 7
    package static let ctrlTypeBitmask: UInt32 = 8
    package static let ctrlTypeIntegerMenu: UInt32 = 9

    package static let eventCtrl: UInt32 = 3
    package static let eventSourceChange: UInt32 = 5
    package static let eventSubFlagSendInitial: UInt32 = 1
    package static let eventCtrlChangeValue: UInt32 = 1
    package static let eventCtrlChangeFlags: UInt32 = 2
    package static let eventCtrlChangeRange: UInt32 = 4

    // Control ids (V4L2_CID_*).
    package static let cidBrightness: UInt32 = 0x0098_0900
    package static let cidContrast: UInt32 = 0x0098_0901
    package static let cidSaturation: UInt32 = 0x0098_0902
    package static let cidHue: UInt32 = 0x0098_0903
    package static let cidAutoWhiteBalance: UInt32 = 0x0098_090c
    package static let cidGain: UInt32 = 0x0098_0913
    package static let cidPowerLineFrequency: UInt32 = 0x0098_0918
    package static let cidWhiteBalanceTemperature: UInt32 = 0x0098_091a
    package static let cidExposureAuto: UInt32 = 0x009a_0901
    package static let cidExposureAbsolute: UInt32 = 0x009a_0902
    package static let cidFocusAbsolute: UInt32 = 0x009a_090a
    package static let cidFocusAuto: UInt32 = 0x009a_090c
    package static let cidZoomAbsolute: UInt32 = 0x009a_090d
    // The flash class (V4L2_CID_FLASH_CLASS_BASE = 0x009c0900).
    package static let cidFlashLEDMode: UInt32 = 0x009c_0901
    package static let cidFlashStrobeSource: UInt32 = 0x009c_0902
    package static let cidFlashStrobe: UInt32 = 0x009c_0903
    package static let cidFlashStrobeStop: UInt32 = 0x009c_0904
    package static let cidFlashIntensity: UInt32 = 0x009c_0907
    package static let cidFlashTorchIntensity: UInt32 = 0x009c_0908
    package static let cidFlashFault: UInt32 = 0x009c_090a

    /// The engine's meaning of a V4L2 control id.
    package static func standard(for id: UInt32) -> StandardControl? {
        switch id {
        case cidExposureAuto: return .exposureAuto
        case cidExposureAbsolute: return .exposureTime
        case cidGain: return .gain
        case cidFocusAuto: return .focusAuto
        case cidFocusAbsolute: return .focusAbsolute
        case cidAutoWhiteBalance: return .whiteBalanceAuto
        case cidWhiteBalanceTemperature: return .whiteBalanceTemperature
        case cidPowerLineFrequency: return .powerLineFrequency
        case cidBrightness: return .brightness
        case cidContrast: return .contrast
        case cidSaturation: return .saturation
        case cidZoomAbsolute: return .zoomAbsolute
        case cidFlashLEDMode: return .flashLEDMode
        case cidFlashStrobeSource: return .flashStrobeSource
        case cidFlashStrobe: return .flashStrobe
        case cidFlashStrobeStop: return .flashStrobeStop
        case cidFlashIntensity: return .flashIntensity
        case cidFlashTorchIntensity: return .torchIntensity
        case cidFlashFault: return .flashFault
        default: return nil
        }
    }
}

/// Reads a NUL-terminated C `char[N]` field imported as a tuple.
@inline(__always)
func cString<T>(_ tuple: T) -> String {
    withUnsafeBytes(of: tuple) { raw in String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self) }
}

/// Writes `s` into a C `char[N]` tuple field (truncated, NUL-terminated).
package func setCString<T>(_ tuple: inout T, _ s: String) {
    withUnsafeMutableBytes(of: &tuple) { raw in
        raw.initializeMemory(as: UInt8.self, repeating: 0)
        for (i, b) in s.utf8.prefix(raw.count - 1).enumerated() { raw[i] = b }
    }
}

/// Lower-case name with underscores, as `v4l2-ctl` derives it from a control's name.
func controlVariableName(_ name: String) -> String {
    var s = ""
    var pendingUnderscore = false
    for c in name.unicodeScalars {
        if (c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || (c >= "0" && c <= "9") {
            if pendingUnderscore { s.append("_") }
            pendingUnderscore = false
            s.unicodeScalars.append(c.properties.lowercaseMapping.unicodeScalars.first!)
        } else if !s.isEmpty {
            pendingUnderscore = true
        }
    }
    return s
}

/// An open V4L2 node: the internal `Result<_, Errno>` layer over the syscall shim.
struct V4L2Handle: Sendable {
    let fd: Int32
    let syscalls: any V4L2Syscalls

    /// `ioctl` with a typed argument; `EINTR` is retried.
    @inline(__always)
    func ioctl<T>(_ request: UInt, _ arg: inout T) -> Result<Void, Errno> {
        let sys = syscalls, fd = fd
        return retryingInterrupts {
            withUnsafeMutableBytes(of: &arg) { raw in sys.ioctl(fd, request, raw.baseAddress!) }
        }.map { _ in () }
    }

    func poll(events: PollEvents, timeoutMilliseconds: Int32) -> Result<PollEvents, Errno> {
        retryingInterrupts { syscalls.poll(fd, events: events, timeoutMilliseconds: timeoutMilliseconds) }
    }

    func close() { _ = retryingInterrupts { syscalls.close(fd) } }

    static func open(_ path: String, syscalls: any V4L2Syscalls) -> Result<V4L2Handle, Errno> {
        retryingInterrupts { syscalls.open(path, flags: O_RDWR | O_NONBLOCK | O_CLOEXEC) }
            .map { V4L2Handle(fd: $0, syscalls: syscalls) }
    }

    // MARK: Typed requests

    func queryCapability() -> Result<v4l2_capability, Errno> {
        var cap = v4l2_capability()
        return ioctl(VF_VIDIOC_QUERYCAP, &cap).map { cap }
    }

    func enumFormat(index: UInt32) -> Result<v4l2_fmtdesc, Errno> {
        var d = v4l2_fmtdesc()
        d.index = index
        d.type = V4L2.bufTypeVideoCapture
        return ioctl(VF_VIDIOC_ENUM_FMT, &d).map { d }
    }

    func enumFrameSize(fourcc: UInt32, index: UInt32) -> Result<v4l2_frmsizeenum, Errno> {
        var s = v4l2_frmsizeenum()
        s.index = index
        s.pixel_format = fourcc
        return ioctl(VF_VIDIOC_ENUM_FRAMESIZES, &s).map { s }
    }

    func enumFrameInterval(fourcc: UInt32, width: Int, height: Int, index: UInt32) -> Result<v4l2_frmivalenum, Errno> {
        var i = v4l2_frmivalenum()
        i.index = index
        i.pixel_format = fourcc
        i.width = UInt32(clamping: width)
        i.height = UInt32(clamping: height)
        return ioctl(VF_VIDIOC_ENUM_FRAMEINTERVALS, &i).map { i }
    }

    func getFormat() -> Result<v4l2_pix_format, Errno> {
        var f = v4l2_format()
        f.type = V4L2.bufTypeVideoCapture
        return ioctl(VF_VIDIOC_G_FMT, &f).map { f.fmt.pix }
    }

    func setFormat(fourcc: UInt32, width: Int, height: Int) -> Result<v4l2_pix_format, Errno> {
        var f = v4l2_format()
        f.type = V4L2.bufTypeVideoCapture
        f.fmt.pix.width = UInt32(clamping: width)
        f.fmt.pix.height = UInt32(clamping: height)
        f.fmt.pix.pixelformat = fourcc
        f.fmt.pix.field = V4L2.fieldNone
        return ioctl(VF_VIDIOC_S_FMT, &f).map { f.fmt.pix }
    }

    func getInterval() -> Result<FrameInterval, Errno> {
        var p = v4l2_streamparm()
        p.type = V4L2.bufTypeVideoCapture
        return ioctl(VF_VIDIOC_G_PARM, &p).map {
            FrameInterval(numerator: p.parm.capture.timeperframe.numerator, denominator: p.parm.capture.timeperframe.denominator)
        }
    }

    func setInterval(_ interval: FrameInterval) -> Result<FrameInterval, Errno> {
        var p = v4l2_streamparm()
        p.type = V4L2.bufTypeVideoCapture
        p.parm.capture.timeperframe.numerator = interval.numerator
        p.parm.capture.timeperframe.denominator = interval.denominator
        return ioctl(VF_VIDIOC_S_PARM, &p).map {
            FrameInterval(numerator: p.parm.capture.timeperframe.numerator, denominator: p.parm.capture.timeperframe.denominator)
        }
    }

    func requestBuffers(_ count: Int) -> Result<Int, Errno> {
        var r = v4l2_requestbuffers()
        r.count = UInt32(clamping: count)
        r.type = V4L2.bufTypeVideoCapture
        r.memory = V4L2.memoryMMAP
        return ioctl(VF_VIDIOC_REQBUFS, &r).map { Int(r.count) }
    }

    func queryBuffer(_ index: Int) -> Result<v4l2_buffer, Errno> {
        var b = v4l2_buffer()
        b.index = UInt32(index)
        b.type = V4L2.bufTypeVideoCapture
        b.memory = V4L2.memoryMMAP
        return ioctl(VF_VIDIOC_QUERYBUF, &b).map { b }
    }

    @inline(__always)
    func queueBuffer(_ index: Int) -> Result<Void, Errno> {
        var b = v4l2_buffer()
        b.index = UInt32(truncatingIfNeeded: index)
        b.type = V4L2.bufTypeVideoCapture
        b.memory = V4L2.memoryMMAP
        return ioctl(VF_VIDIOC_QBUF, &b)
    }

    @inline(__always)
    func dequeueBuffer(into b: inout v4l2_buffer) -> Result<Void, Errno> {
        b = v4l2_buffer()
        b.type = V4L2.bufTypeVideoCapture
        b.memory = V4L2.memoryMMAP
        return ioctl(VF_VIDIOC_DQBUF, &b)
    }

    func streamOn() -> Result<Void, Errno> {
        var t = Int32(V4L2.bufTypeVideoCapture)
        return ioctl(VF_VIDIOC_STREAMON, &t)
    }

    func streamOff() -> Result<Void, Errno> {
        var t = Int32(V4L2.bufTypeVideoCapture)
        return ioctl(VF_VIDIOC_STREAMOFF, &t)
    }

    func subscribe(type: UInt32, id: UInt32, flags: UInt32 = 0) -> Result<Void, Errno> {
        var s = v4l2_event_subscription()
        s.type = type
        s.id = id
        s.flags = flags
        return ioctl(VF_VIDIOC_SUBSCRIBE_EVENT, &s)
    }

    func dequeueEvent() -> Result<v4l2_event, Errno> {
        var e = v4l2_event()
        return ioctl(VF_VIDIOC_DQEVENT, &e).map { e }
    }
}
