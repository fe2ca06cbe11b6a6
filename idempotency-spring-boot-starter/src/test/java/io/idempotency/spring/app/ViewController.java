package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpSession;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Controller;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.ResponseBody;
import org.springframework.web.servlet.ModelAndView;
import org.springframework.web.servlet.View;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/** A controller that answers with views rather than bodies: Post/Redirect/Get. */
@Controller
public class ViewController {

    private final JdbcClient jdbc;

    public ViewController(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    /** Writes a row and redirects to it; the redirect is stored, so that a retry is sent to the same order. */
    @PostMapping("/views/orders")
    @Idempotent
    public String create(@RequestBody OrderController.OrderRequest request) {
        long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                .query(Long.class).single();
        return "redirect:/orders/" + id;
    }

    /**
     * Writes a row, remembers it in the client's session (which this request creates) and redirects to it: Spring
     * MVC's redirect encodes its URL, where the container may write the session's id for a client without cookies.
     */
    @PostMapping("/views/session-orders")
    @Idempotent
    public String createInSession(@RequestBody OrderController.OrderRequest request, HttpSession session) {
        return redirectInSession(request, session);
    }

    /** The same without {@code @Idempotent}: what the container alone makes of the redirect. */
    @PostMapping("/views/session-orders/unguarded")
    public String createInSessionUnguarded(@RequestBody OrderController.OrderRequest request, HttpSession session) {
        return redirectInSession(request, session);
    }

    private String redirectInSession(OrderController.OrderRequest request, HttpSession session) {
        long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                .query(Long.class).single();
        session.setAttribute("lastOrder", id);
        return "redirect:/orders/" + id;
    }

    /** Writes a row and forwards to a page about it: the container ends the response when a forward returns. */
    @PostMapping("/views/forwarding-orders")
    @Idempotent
    public String createAndForward(@RequestBody OrderController.OrderRequest request) {
        jdbc.sql("insert into orders (note) values (?)").param(request.note()).update();
        return "forward:/views/order-page";
    }

    /** The same, forwarding through the servlet context's dispatcher rather than the request's. */
    @PostMapping("/views/context-forwarding-orders")
    @Idempotent
    public void createAndForwardThroughTheContext(@RequestBody OrderController.OrderRequest request,
                                                  HttpServletRequest servletRequest,
                                                  HttpServletResponse servletResponse)
            throws ServletException, IOException {
        jdbc.sql("insert into orders (note) values (?)").param(request.note()).update();
        servletRequest.getServletContext().getRequestDispatcher("/views/order-page")
                .forward(servletRequest, servletResponse);
    }

    /**
     * A page that fails part way through its rendering, as a template does that meets a value it cannot show: after
     * the handler returned, outside Spring MVC's exception handlers, which only see what the handler and the writing of
     * its body raise.
     */
    private static final View FAILING_PAGE = (model, request, response) -> {
        response.setContentType("text/html;charset=UTF-8");
        response.getWriter().write("<p>order " + model.get("id"));
        throw new IllegalArgumentException("the page cannot show order " + model.get("id"));
    };

    /** Writes a row and answers with a page that fails to render. */
    @PostMapping("/views/failing-page-orders")
    @Idempotent
    public ModelAndView createWithFailingPage(@RequestBody OrderController.OrderRequest request) {
        long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                .query(Long.class).single();
        return new ModelAndView(FAILING_PAGE, Map.of("id", id));
    }

    /** The page a forward shows. */
    @PostMapping("/views/order-page")
    @ResponseBody
    public String orderPage() {
        return "order placed";
    }

    /**
     * Writes a row and answers with a page that includes another resource, which answers 404 with a header of its
     * own: the container ignores the status and headers of an included resource.
     */
    @PostMapping("/views/including-orders")
    @Idempotent
    public void createAndInclude(@RequestBody OrderController.OrderRequest request, HttpServletRequest servletRequest,
                                 HttpServletResponse servletResponse) throws ServletException, IOException {
        createWithAnInclude(request, servletRequest, servletResponse);
    }

    /** The same without {@code @Idempotent}: what the container alone makes of the include. */
    @PostMapping("/views/including-orders/unguarded")
    public void createAndIncludeUnguarded(@RequestBody OrderController.OrderRequest request,
                                          HttpServletRequest servletRequest, HttpServletResponse servletResponse)
            throws ServletException, IOException {
        createWithAnInclude(request, servletRequest, servletResponse);
    }

    private void createWithAnInclude(OrderController.OrderRequest request, HttpServletRequest servletRequest,
                                     HttpServletResponse servletResponse) throws ServletException, IOException {
        createWithAnInclude(request, servletRequest, servletResponse, "/views/missing-fragment");
    }

    /** Writes a row and answers with a page that includes a resource that is gone, which it says with sendError. */
    @PostMapping("/views/including-gone-orders")
    @Idempotent
    public void createAndIncludeGone(@RequestBody OrderController.OrderRequest request,
                                     HttpServletRequest servletRequest, HttpServletResponse servletResponse)
            throws ServletException, IOException {
        createWithAnInclude(request, servletRequest, servletResponse, "/views/gone-fragment");
    }

    /** The same without {@code @Idempotent}: what the container alone makes of the include. */
    @PostMapping("/views/including-gone-orders/unguarded")
    public void createAndIncludeGoneUnguarded(@RequestBody OrderController.OrderRequest request,
                                              HttpServletRequest servletRequest, HttpServletResponse servletResponse)
            throws ServletException, IOException {
        createWithAnInclude(request, servletRequest, servletResponse, "/views/gone-fragment");
    }

    /** The first, including through the servlet context's dispatcher rather than the request's. */
    @PostMapping("/views/context-including-orders")
    @Idempotent
    public void createAndIncludeThroughTheContext(@RequestBody OrderController.OrderRequest request,
                                                  HttpServletRequest servletRequest,
                                                  HttpServletResponse servletResponse)
            throws ServletException, IOException {
        createWithAnInclude(request, servletRequest, servletResponse, "context:/views/missing-fragment");
    }

    /** The same without {@code @Idempotent}: what the container alone makes of the include. */
    @PostMapping("/views/context-including-orders/unguarded")
    public void createAndIncludeThroughTheContextUnguarded(@RequestBody OrderController.OrderRequest request,
                                                           HttpServletRequest servletRequest,
                                                           HttpServletResponse servletResponse)
            throws ServletException, IOException {
        createWithAnInclude(request, servletRequest, servletResponse, "context:/views/missing-fragment");
    }

    /** Includes {@code fragment} through the request's dispatcher, or the servlet context's if it starts "context:". */
    private void createWithAnInclude(OrderController.OrderRequest request, HttpServletRequest servletRequest,
                                     HttpServletResponse servletResponse, String fragment)
            throws ServletException, IOException {
        jdbc.sql("insert into orders (note) values (?)").param(request.note()).update();
        servletResponse.setStatus(201);
        servletResponse.setContentType("text/html;charset=UTF-8");
        servletResponse.getOutputStream().write("<p>".getBytes(StandardCharsets.UTF_8));
        (fragment.startsWith("context:")
                ? servletRequest.getServletContext().getRequestDispatcher(fragment.substring("context:".length()))
                : servletRequest.getRequestDispatcher(fragment)).include(servletRequest, servletResponse);
        servletResponse.getOutputStream().write("</p>".getBytes(StandardCharsets.UTF_8));
    }

    /** A fragment that is not there, as a page included in another tells it. */
    @PostMapping("/views/missing-fragment")
    public ResponseEntity<String> missingFragment() {
        return ResponseEntity.status(404).header("X-Fragment", "missing").body("no fragment");
    }

    /** A fragment that is gone, as a servlet tells it: with sendError, which an included resource cannot send. */
    @PostMapping("/views/gone-fragment")
    public void goneFragment(HttpServletResponse response) throws IOException {
        response.sendError(410);
    }
}
