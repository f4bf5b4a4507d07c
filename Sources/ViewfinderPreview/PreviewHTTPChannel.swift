import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1

/// The preview server's HTTP/1 connections: Hummingbird's HTTP/1 channel, with
/// ``HTTP10Responses`` between NIO's HTTP/1 codec and Hummingbird's (which leaves the HTTP
/// version out of its requests and answers every one as HTTP/1.1).
struct PreviewHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    /// A connection that sends nothing for this long is closed (a stream being answered is not idle).
    let idleTimeout: Duration

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                withPipeliningAssistance: false,   // NIOAsyncChannel takes one request at a time
                withErrorHandling: false,          // Hummingbird answers parse errors itself
                withOutboundHeaderValidation: false,
                withEncoderConfiguration: .init(),
                withDecoderLimitConfiguration: Self.decoderLimits
            )
            try channel.pipeline.syncOperations.addHandler(HTTP10Responses())
            try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: false))
            try channel.pipeline.syncOperations.addHandler(HTTPConnectionStateHandler(idleTimeout: idleTimeout, logger: logger))
            return try NIOAsyncChannel(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    /// Hummingbird's own limits: 80 KiB for a header field and for all of them, 1000 fields.
    static var decoderLimits: NIOHTTPDecoderLimitConfiguration {
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = 80 * 1024
        limits.maxHeaderListSize = 80 * 1024
        limits.maxHeaderFieldCount = 1000
        return limits
    }

    func handle(value asyncChannel: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: asyncChannel, logger: logger)
    }
}

/// Answers an HTTP/1.0 request as HTTP/1.0 and closes its connection after the response:
/// HTTP/1.0 has no chunked transfer coding, so a response of unknown length (the MJPEG stream,
/// the event stream) was sent chunked to a client that cannot read it, and its connection was
/// kept open until the idle timeout for a client that reads to the end (HTTP/1.0's framing).
/// The request is marked `Connection: close` (Hummingbird then ends the connection after it), and
/// its response head carries version 1.0 and `Connection: close` (NIO's encoder then sends the
/// body as it is, ended by the close).
final class HTTP10Responses: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Whether each request not yet answered was HTTP/1.0, oldest first.
    private var oldVersion = CircularBuffer<Bool>()

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var part = unwrapInboundIn(data)
        if case .head(var head) = part {
            let old = head.version.major == 1 && head.version.minor == 0
            oldVersion.append(old)
            if old {
                head.headers.replaceOrAdd(name: "connection", value: "close")
                part = .head(head)
            }
            // An absolute-form target (`GET http://host:port/path`) names the host that counts;
            // the Host header is ignored (RFC 9112 §3.2.2). The conversion after this keeps only
            // the path and takes the host from the header, so the header is made the target's:
            // the loopback check then sees the host the client asked for.
            if let authority = Self.absoluteFormAuthority(head.uri) {
                head.headers.replaceOrAdd(name: "host", value: authority)
                part = .head(head)
            }
        }
        context.fireChannelRead(wrapInboundOut(part))
    }

    /// The authority of an absolute-form request target (`http://127.0.0.1:8080/x` →
    /// `127.0.0.1:8080`); nil for the origin form (`/x`) and `*`.
    static func absoluteFormAuthority(_ uri: String) -> String? {
        guard let r = uri.range(of: "://"), uri[..<r.lowerBound].allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }),
              !uri[..<r.lowerBound].isEmpty else { return nil }
        let rest = uri[r.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        // Userinfo (`user@host`) is no part of the host.
        let host = authority.split(separator: "@", omittingEmptySubsequences: false).last ?? authority
        return String(host)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var part = unwrapOutboundIn(data)
        if case .head(var head) = part {
            // A 1xx other than 101 is followed by the final head: it answers no request by itself.
            let interim = head.status.code >= 100 && head.status.code < 200 && head.status.code != 101
            if !interim, let old = oldVersion.popFirst(), old {
                head.version = .http1_0
                head.headers.replaceOrAdd(name: "connection", value: "close")
                part = .head(head)
            }
        }
        context.write(wrapOutboundOut(part), promise: promise)
    }
}
