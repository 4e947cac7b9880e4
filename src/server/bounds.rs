//! The two time bounds every request to the webhook's routes gets: its answer within the
//! request timeout of its start (else `408 Request Timeout`), and no stall in its body longer
//! than the body stall timeout between two pieces of it (else the body read fails and the
//! request is refused with a client error; the connection is then closed). [`BoundsLayer`]
//! does what tower-http's `TimeoutLayer` and `RequestBodyTimeoutLayer` did, with one
//! difference in cost: those start a timer before they look at the work (one for the request,
//! one more for every piece of body), and these poll the work first and start a timer only when
//! it is pending. A review whose body is already read and whose answer is ready when first
//! polled (the warm path) registers no timer at all; one that waits has the same bounds as
//! before. The timers are polled outside tokio's cooperative budget
//! ([`tokio::task::coop::unconstrained`], as tokio's own `Timeout` does), so work that spends
//! the whole budget on every poll cannot starve them. Headers are bounded elsewhere
//! ([`super::keep_alive`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::task::coop::{unconstrained, Unconstrained};
use tokio::time::{sleep, sleep_until, Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

/// The request and body-stall bounds, as one layer (see the module).
#[derive(Debug, Clone, Copy)]
pub(super) struct BoundsLayer {
    request_timeout: Duration,
    body_stall_timeout: Duration,
}

impl BoundsLayer {
    pub(super) fn new(request_timeout: Duration, body_stall_timeout: Duration) -> Self {
        Self {
            request_timeout,
            body_stall_timeout,
        }
    }
}

impl<S> Layer<S> for BoundsLayer {
    type Service = Bounds<S>;

    fn layer(&self, inner: S) -> Bounds<S> {
        Bounds {
            inner,
            bounds: *self,
        }
    }
}

/// The service [`BoundsLayer`] makes.
#[derive(Debug, Clone)]
pub(super) struct Bounds<S> {
    inner: S,
    bounds: BoundsLayer,
}

impl<S, B, R> Service<Request<B>> for Bounds<S>
where
    S: Service<Request<StallBody<B>>, Response = Response<R>>,
    R: Default,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Deadline<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let deadline = Instant::now() + self.bounds.request_timeout;
        let stall = self.bounds.body_stall_timeout;
        let request = request.map(|body| StallBody::new(body, stall));
        Deadline {
            inner: self.inner.call(request),
            deadline,
            sleep: None,
        }
    }
}

pin_project! {
    /// A request's answer, or `408` once its deadline has passed while it was still pending.
    pub(super) struct Deadline<F> {
        #[pin]
        inner: F,
        deadline: Instant,
        #[pin]
        sleep: Option<Unconstrained<Sleep>>,
    }
}

impl<F, R, E> Future for Deadline<F>
where
    F: Future<Output = Result<Response<R>, E>>,
    R: Default,
{
    type Output = Result<Response<R>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(answer) = this.inner.poll(cx) {
            return Poll::Ready(answer);
        }
        if this.sleep.is_none() {
            this.sleep
                .set(Some(unconstrained(sleep_until(*this.deadline))));
        }
        if let Some(timer) = this.sleep.as_pin_mut() {
            ready!(timer.poll(cx));
        }
        let mut answer = Response::new(R::default());
        *answer.status_mut() = StatusCode::REQUEST_TIMEOUT;
        Poll::Ready(Ok(answer))
    }
}

/// The error a body read gets when the body stalled past its bound.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled for longer than {0:?}")]
pub(super) struct BodyStalled(Duration);

pin_project! {
    /// A request body that fails with [`BodyStalled`] when no piece of it arrives within the
    /// stall timeout of a read that found none.
    pub(super) struct StallBody<B> {
        #[pin]
        body: B,
        timeout: Duration,
        #[pin]
        sleep: Option<Unconstrained<Sleep>>,
    }
}

impl<B> StallBody<B> {
    fn new(body: B, timeout: Duration) -> Self {
        Self {
            body,
            timeout,
            sleep: None,
        }
    }
}

impl<B> Body for StallBody<B>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if let Poll::Ready(frame) = this.body.poll_frame(cx) {
            // Progress: the next wait, if any, gets the whole timeout again.
            this.sleep.set(None);
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        if this.sleep.is_none() {
            this.sleep.set(Some(unconstrained(sleep(*this.timeout))));
        }
        if let Some(timer) = this.sleep.as_pin_mut() {
            ready!(timer.poll(cx));
        }
        Poll::Ready(Some(Err(Box::new(BodyStalled(*this.timeout)))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Bytes;
    use tokio::sync::mpsc;

    use super::*;

    const REQUEST: Duration = Duration::from_secs(70);
    const STALL: Duration = Duration::from_secs(10);

    /// A body whose pieces the test sends; dropping the sender ends it.
    struct Fed(mpsc::UnboundedReceiver<Bytes>);

    impl Body for Fed {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.0
                .poll_recv(cx)
                .map(|piece| piece.map(|bytes| Ok(Frame::data(bytes))))
        }
    }

    fn body() -> (mpsc::UnboundedSender<Bytes>, Pin<Box<StallBody<Fed>>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, Box::pin(StallBody::new(Fed(rx), STALL)))
    }

    type Read = Option<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>>;

    async fn next(body: &mut Pin<Box<StallBody<Fed>>>) -> Read {
        std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await
    }

    fn data(read: Read) -> Bytes {
        match read {
            Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
            Some(Err(e)) => panic!("a piece, not {e}"),
            None => panic!("a piece, not the end"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_coming_is_read_whole_however_long_it_takes() {
        let (tx, mut body) = body();
        let feeder = tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(STALL - Duration::from_secs(1)).await;
                tx.send(Bytes::from_static(b"ab")).expect("reader alive");
            }
        });
        let started = Instant::now();
        let mut whole = Vec::new();
        while let Some(read) = next(&mut body).await {
            whole.extend_from_slice(&data(Some(read)));
        }
        assert_eq!(&whole[..], b"ababababab");
        assert_eq!(started.elapsed(), 5 * (STALL - Duration::from_secs(1)));
        feeder.await.expect("feeder");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_fails_at_the_stall_timeout_after_its_last_read() {
        let (tx, mut body) = body();
        tx.send(Bytes::from_static(b"{")).expect("reader alive");
        assert_eq!(&data(next(&mut body).await)[..], b"{");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let waited = Instant::now();
        match next(&mut body).await {
            Some(Err(error)) => assert!(error.is::<BodyStalled>(), "{error}"),
            Some(Ok(_)) => panic!("a stall, not a piece"),
            None => panic!("a stall, not the end"),
        }
        assert_eq!(
            waited.elapsed(),
            STALL,
            "timed from the read that found nothing"
        );
        drop(tx);
    }

    /// A runtime with no timers: creating a `Sleep` in it panics, so whatever runs in it must
    /// start no timer.
    fn without_timers() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    }

    #[test]
    fn a_ready_body_starts_no_timer() {
        without_timers().block_on(async {
            let (tx, mut body) = body();
            tx.send(Bytes::from_static(b"{}")).expect("reader alive");
            drop(tx);
            assert_eq!(&data(next(&mut body).await)[..], b"{}");
            assert!(next(&mut body).await.is_none());
        });
    }

    /// What the service behind the bounds does before it answers.
    #[derive(Clone, Copy)]
    enum Work {
        /// Answers at once.
        None,
        /// Answers after this long.
        Sleep(Duration),
        /// Never answers, spending tokio's whole cooperative budget on every poll.
        Spin,
    }

    /// Spends tokio's whole cooperative budget on every poll, forever.
    async fn spin() {
        loop {
            tokio::task::coop::consume_budget().await;
        }
    }

    impl<B> Service<Request<B>> for Work {
        type Response = Response<String>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Response<String>, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<B>) -> Self::Future {
            let work = *self;
            Box::pin(async move {
                match work {
                    Work::None => {}
                    Work::Sleep(delay) => tokio::time::sleep(delay).await,
                    Work::Spin => spin().await,
                }
                Ok(Response::new("answer".to_string()))
            })
        }
    }

    fn bounded(work: Work) -> Bounds<Work> {
        BoundsLayer::new(REQUEST, STALL).layer(work)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_within_the_request_timeout_goes_out_as_is() {
        let mut service = bounded(Work::Sleep(REQUEST - Duration::from_secs(1)));
        let answer = service.call(Request::new(())).await.expect("infallible");
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(answer.body(), "answer");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_still_pending_at_its_deadline_is_answered_408() {
        let mut service = bounded(Work::Sleep(REQUEST + Duration::from_secs(1)));
        let started = Instant::now();
        let answer = service.call(Request::new(())).await.expect("infallible");
        assert_eq!(answer.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(answer.body(), "");
        assert_eq!(started.elapsed(), REQUEST, "timed from the call");
    }

    #[test]
    fn an_answer_ready_at_once_starts_no_timer() {
        without_timers().block_on(async {
            let mut service = bounded(Work::None);
            let answer = service.call(Request::new(())).await.expect("infallible");
            assert_eq!(answer.status(), StatusCode::OK);
        });
    }

    #[tokio::test]
    async fn work_that_spends_the_whole_budget_still_gets_408() {
        let timeout = Duration::from_millis(300);
        let mut service = BoundsLayer::new(timeout, STALL).layer(Work::Spin);
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(5), service.call(Request::new(())))
            .await
            .expect("answered within 5 s")
            .expect("infallible");
        assert_eq!(answer.status(), StatusCode::REQUEST_TIMEOUT);
        assert!(started.elapsed() >= timeout);
    }

    /// A body that spends tokio's whole cooperative budget on every read and never yields a
    /// piece.
    struct SpinningBody(Pin<Box<dyn Future<Output = ()> + Send>>);

    impl Body for SpinningBody {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let _ = self.0.as_mut().poll(cx);
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_body_that_spends_the_whole_budget_still_stalls_out() {
        let stall = Duration::from_millis(300);
        let spin = SpinningBody(Box::pin(spin()));
        let mut body = Box::pin(StallBody::new(spin, stall));
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)),
        )
        .await
        .expect("a stall within 5 s");
        assert!(matches!(read, Some(Err(ref e)) if e.is::<BodyStalled>()));
    }
}
