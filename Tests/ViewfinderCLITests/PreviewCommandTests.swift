import Testing
import Foundation
@testable import ViewfinderCommandLine

/// `viewfinder preview`: its usage errors, and a whole run that ends with its source.
@Suite struct PreviewCommandTests {
    @Test func usageErrorsExit64() {
        #expect(CLIExit.run(["preview", "--device", "pattern:width=64,height=32", "--port", "70000"]) == 64)
        #expect(CLIExit.run(["preview", "--device", "pattern:width=64,height=32", "--rotation", "45"]) == 64)
        #expect(CLIExit.run(["preview", "--device", "pattern:width=64,height=32", "--preview-quality", "0"]) == 64)
        // Four numbers that are not an IPv4 address (it exited 1 after a failed bind).
        #expect(CLIExit.run(["preview", "--device", "pattern:width=64,height=32", "--bind", "999.1.1.1"]) == 64)
        // Not loopback with a token too short to be one; an output folder that does not exist.
        #expect(CLIExit.run(["preview", "--device", "pattern:width=64,height=32", "--port", "0", "--bind", "0.0.0.0", "--token", "short"]) == 64)
        #expect(CLIExit.run(["preview", "--device", "pattern:width=64,height=32", "--port", "0", "--output", "/nonexistent-vf-folder"]) == 64)
    }

    @Test func aRunEndsWhenItsSourceEnds() {
        // A finite, non-live source: the session finishes, the server shuts down, exit 0.
        #expect(CLIExit.run(["preview", "--device", "pattern:width=64,height=32,frames=20", "--port", "0", "--output", NSTemporaryDirectory()]) == 0)
        #expect(CLIExit.run(["preview", "--device", "sim:width=160,height=120", "--port", "0", "--duration", "0.5", "--output", NSTemporaryDirectory()]) == 0)
    }
}
